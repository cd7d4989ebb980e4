"""The dashboard's number formatter and "best" highlight, run in node on app.js itself.

The page and the terminal must write a number the same way (``8.03k``, never ``8.03e+3``), and
the comparison table must never highlight a run that broke the SLO as the best. The helpers
section of ``app.js`` is plain functions, so node evaluates it without a browser; the test
skips, saying why, only where no ``node`` binary exists.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kale.terminal.formatting import format_number, format_percent

APP_JS = Path(__file__).resolve().parents[2] / "kale" / "dashboard" / "static" / "app.js"
NODE = shutil.which("node") or shutil.which("nodejs")
VALUES = [8030.0, 10400.0, 61390.0, 999.7, 999999.0, 1234567.0, 612.4, 12.345, 9.996, 2.5]
VALUES += [0.5, 0.0123, 1.23e-7, 0.0, -61390.0, 25.0, 46.0, 3.0, 1e13]


def _helpers() -> str:
    text = APP_JS.read_text(encoding="utf-8")
    return text[text.index("// -- helpers") : text.index("// -- cluster")]


def _node(script: str) -> object:
    if NODE is None:
        pytest.skip(
            "node is not installed: the dashboard's helpers cannot be run outside a browser"
        )
    done = subprocess.run(
        [NODE, "-e", _helpers() + "\n" + script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_page_formats_numbers_exactly_as_the_terminal():
    shown = _node(f"console.log(JSON.stringify({json.dumps(VALUES)}.map((v) => fmt(v))))")
    assert shown == [format_number(v) for v in VALUES]
    assert "e" not in "".join(shown)  # never an exponent


def test_percentages_read_the_same_on_the_page():
    fractions = [0.0123, 0.25, 0.0, 0.19567]
    shown = _node(f"console.log(JSON.stringify({json.dumps(fractions)}.map(fmtPct)))")
    assert shown == [format_percent(f) for f in fractions] == ["1.23%", "25%", "0%", "19.6%"]


def test_the_best_highlight_never_goes_to_a_run_that_broke_the_slo():
    policies = {
        # cheapest of all, but 20 % of its steps were late: not a win
        "static-min": {"slo_violation_rate": 0.20, "gpu_hours": 10.0, "rescale_count": 0},
        "kale": {"slo_violation_rate": 0.004, "gpu_hours": 40.0, "rescale_count": 12},
        "hpa": {"slo_violation_rate": 0.0, "gpu_hours": 55.0, "rescale_count": 30},
    }
    keys = ["slo_violation_rate", "gpu_hours", "rescale_count"]
    best = _node(
        f"console.log(JSON.stringify(simBest({json.dumps(policies)}, "
        f"{json.dumps(list(policies))}, {json.dumps(keys)})))"
    )
    assert best == {"slo_violation_rate": ["hpa"], "gpu_hours": ["kale"], "rescale_count": ["kale"]}


def test_nothing_is_highlighted_when_every_run_broke_the_slo():
    policies = {"a": {"slo_violation_rate": 0.5, "gpu_hours": 1.0}}
    best = _node(
        f"console.log(JSON.stringify(simBest({json.dumps(policies)}, ['a'], ['gpu_hours'])))"
    )
    assert best == {"gpu_hours": []}
