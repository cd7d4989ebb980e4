"""Fail CI when a module imports across the layer rules of the design.

* ``kafka`` only under ``autoscaler/sources/``; ``kubernetes`` only under
  ``autoscaler/actuators/`` (and a lease module); ``torch`` never in ``autoscaler``;
* ``forecasting`` and ``throughput`` are leaves: they never import ``autoscaler``,
  each other, or (``throughput``) torch; torch in ``forecasting`` only under
  ``forecasting/transformer/``;
* ``autoscaler.cli`` is imported by nobody but itself: ``trainer/`` and the rest of
  ``autoscaler`` use ``autoscaler.terminal`` for output (the CLI imports them, not the reverse);
* no import cycle between the packages of ``autoscaler`` (``cli``, ``demo``, ``controller``,
  …, and its top-level modules) and ``trainer``, lazy imports inside functions included.

Run: ``python tools/check_layers.py`` (exit 1 and one line per violation).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (package folder, imported module or package, folders allowed to import it, why)
RULES = [
    ("autoscaler", "kafka", ("autoscaler/sources",), "only the Kafka source talks to Kafka"),
    ("autoscaler", "kubernetes", ("autoscaler/actuators",), "only actuators talk to Kubernetes"),
    ("autoscaler", "torch", (), "the autoscaler never needs torch"),
    ("forecasting", "autoscaler", (), "forecasting is a leaf"),
    ("forecasting", "throughput", (), "the leaves stay apart"),
    ("forecasting", "torch", ("forecasting/transformer",), "torch stays in the transformer"),
    ("throughput", "autoscaler", (), "throughput is a leaf"),
    ("throughput", "forecasting", (), "the leaves stay apart"),
    ("throughput", "torch", (), "throughput is numpy/scipy only"),
    ("placement", "autoscaler", (), "placement is a leaf"),
    ("placement", "forecasting", (), "the leaves stay apart"),
    ("placement", "throughput", (), "the leaves stay apart"),
    ("placement", "torch", ("placement/agents",), "torch stays in the learned agents"),
    ("placement", "kubernetes", (), "placement decides; actuators talk to Kubernetes"),
    ("placement", "kafka", (), "placement needs no broker"),
    (
        "trainer",
        "autoscaler.cli",
        (),
        "the CLI imports the trainer's commands; they print with autoscaler.terminal",
    ),
    (
        "autoscaler",
        "autoscaler.cli",
        ("autoscaler/cli",),
        "only the kale entry point imports the CLI; shared output is autoscaler.terminal",
    ),
]
# Packages whose import graph must have no cycle: each subpackage or top-level module of
# autoscaler is one node, trainer another.
CYCLE_ROOTS = ("autoscaler", "trainer")


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, never run."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def imported_modules(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every absolute import of the file, dotted (``from a.b import c`` gives ``a.b``).

    ``runtime_only`` leaves out imports under ``if TYPE_CHECKING:``, which never run and so
    cannot form an import cycle."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree) if runtime_only else set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def imported_names(path: Path) -> set[str]:
    """The top-level packages the file imports."""
    return {name.split(".")[0] for name in imported_modules(path)}


def _imports(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def _node(module: str) -> str | None:
    """The cycle-check node of a module: ``autoscaler.cli.main`` → ``autoscaler.cli``."""
    parts = module.split(".")
    if parts[0] not in CYCLE_ROOTS:
        return None
    return parts[0] if parts[0] != "autoscaler" or len(parts) == 1 else ".".join(parts[:2])


def package_cycles(root: Path = ROOT) -> list[str]:
    """One line per set of packages that import each other, with one file per import."""
    edges: dict[str, dict[str, str]] = {}
    for top in CYCLE_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            here = _node(".".join(rel.with_suffix("").parts))
            for module in imported_modules(path, runtime_only=True):
                there = _node(module)
                if here and there and there != here:
                    edges.setdefault(here, {}).setdefault(there, rel.as_posix())
    found = []
    for group in _strongly_connected(edges):
        members = set(group)
        why = "; ".join(
            f"{edges[a][b]} imports {b}"
            for a in sorted(members)
            for b in sorted(edges.get(a, {}))
            if b in members
        )
        found.append(f"import cycle between {', '.join(sorted(members))}: {why}")
    return found


def _strongly_connected(edges: dict[str, dict[str, str]]) -> list[list[str]]:
    """Tarjan's components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for pkg, name, allowed, why in RULES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if any(rel.startswith(a + "/") for a in allowed):
                continue
            if name == "kubernetes" and "lease" in path.name:
                continue
            if _imports(imported_modules(path), name):
                found.append(f"{rel} imports {name}: {why}")
    return found + package_cycles(root)


def main() -> int:
    found = violations()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
