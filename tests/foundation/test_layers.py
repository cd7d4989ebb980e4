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


def test_only_the_cli_imports_the_cli(tmp_path):
    # The trainer's commands once printed with autoscaler.cli.output: a cli <-> trainer cycle.
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "cli.py").write_text("from autoscaler.cli.output import table\n")
    (tmp_path / "autoscaler" / "demo").mkdir(parents=True)
    (tmp_path / "autoscaler" / "demo" / "summary.py").write_text(
        "def f():\n    from autoscaler.cli import output\n"  # a lazy import counts too
    )
    (tmp_path / "autoscaler" / "cli").mkdir()
    (tmp_path / "autoscaler" / "cli" / "main.py").write_text("import autoscaler.cli.output\n")
    found = _checker().violations(tmp_path)
    assert any(v.startswith("trainer/cli.py imports autoscaler.cli:") for v in found)
    assert any(v.startswith("autoscaler/demo/summary.py imports autoscaler.cli:") for v in found)
    assert not any(v.startswith("autoscaler/cli/main.py") for v in found)


def test_checker_reports_an_import_cycle_between_packages_with_the_files(tmp_path):
    (tmp_path / "autoscaler" / "dashboard").mkdir(parents=True)
    (tmp_path / "autoscaler" / "dashboard" / "app.py").write_text(
        "from autoscaler.controller.timeline import TimelineStore\n"
    )
    (tmp_path / "autoscaler" / "controller").mkdir()
    (tmp_path / "autoscaler" / "controller" / "loop.py").write_text(
        "import autoscaler.dashboard.app\nimport autoscaler.errors\n"
    )
    (tmp_path / "autoscaler" / "errors.py").write_text("")
    found = _checker().violations(tmp_path)
    assert found == [
        "import cycle between autoscaler.controller, autoscaler.dashboard: "
        "autoscaler/controller/loop.py imports autoscaler.dashboard; "
        "autoscaler/dashboard/app.py imports autoscaler.controller"
    ]
