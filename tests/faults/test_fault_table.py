"""The fault table (``python -m tests.faults.fault_table``) runs and meets its targets on the
scenarios that need no broker: an entry point that no test runs rots unseen."""

from __future__ import annotations

import json

import pytest

from tests.faults.fault_table import main

pytestmark = pytest.mark.slow  # kill -9 of worker processes, the fake API server


def test_the_fault_table_meets_its_targets_without_a_broker(tmp_path):
    out = tmp_path / "faults.json"
    scenarios = ["api_409", "kill9_mid_write", "hostile_job"]
    argv = [arg for name in scenarios for arg in ("--only", name)]
    assert main([*argv, "--check", "--json-out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["targets_met"] is True and len(doc["rows"]) == len(scenarios)
