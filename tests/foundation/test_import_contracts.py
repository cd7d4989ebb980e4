"""The import contracts of pyproject.toml hold, and they catch what they are there to catch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "kale",
    "scheduler",
    "trainer",
    "autoscaler",
    "kube",
    "forecasting",
    "throughput",
    "placement",
    "common",
)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed"),
]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_tree_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_kubernetes_import_outside_kube_and_a_cycle_are_both_reported(tmp_path):
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    policy = tmp_path / "autoscaler" / "policy" / "sneaky.py"
    policy.write_text("import kubernetes\n")
    # A cycle that only a type checker follows still counts.
    (tmp_path / "common" / "a.py").write_text("import common.b\n")
    (tmp_path / "common" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import common.a\n"
    )
    result = lint_imports(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "Only kube/ talks to Kubernetes" in out
    assert "autoscaler.policy.sneaky -> kubernetes" in out
    assert "No cycles are allowed in common." in out
