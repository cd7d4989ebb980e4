"""The bytecode count of a steady tick (``benchmarks/controller_bytecodes.py``) is a count:
the same code gives the same number in every fresh process, whatever the machine's load."""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.paths import ROOT


def _count() -> dict:
    args = ["--jobs", "6", "--ticks", "4", "--top", "500", "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.controller_bytecodes", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout)


def test_a_steady_tick_counts_the_same_in_two_processes_and_names_the_planner() -> None:
    first, second = _count(), _count()
    assert first["bytecodes_per_job"] == second["bytecodes_per_job"]
    assert first["by_function"] == second["by_function"]
    assert first["steady_ticks"] >= 2
    assert first["bytecodes_per_job"] > 100
    # What the count is for: the planner's and the stages' per-job work, by function.
    names = first["by_function"]
    assert any(n.startswith("autoscaler/policy/kale.py:") for n in names)
    assert any(n.startswith("autoscaler/controller/reporting.py:") for n in names)
