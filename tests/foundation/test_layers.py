"""The layer rules hold in the tree (the same check `make test` runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checker():
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools/check_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tree_respects_layer_rules():
    assert _checker().violations() == []


def test_checker_catches_a_leaf_importing_the_autoscaler(tmp_path):
    (tmp_path / "throughput").mkdir()
    (tmp_path / "throughput" / "bad.py").write_text("from autoscaler.config import load_job\n")
    (tmp_path / "autoscaler" / "policy").mkdir(parents=True)
    (tmp_path / "autoscaler" / "policy" / "x.py").write_text("import kafka\n")
    found = _checker().violations(tmp_path)
    assert "throughput/bad.py imports autoscaler: throughput is a leaf" in found
    assert "autoscaler/policy/x.py imports kafka: only the Kafka source talks to Kafka" in found
