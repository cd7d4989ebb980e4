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


def test_no_two_modules_import_each_other_even_through_a_package_init():
    # acyclic_siblings squashes each sibling's descendants; a child importing its own
    # package's __init__, which imports the child back, is a cycle only this finds.
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    cycles = [sorted(group) for group in _strongly_connected(graph) if len(group) > 1]
    assert cycles == []


def _strongly_connected(graph) -> list[set[str]]:
    """Tarjan's components of the module graph, iteratively (the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    out.append(group)
    return out
