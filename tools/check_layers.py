"""Fail CI when a module imports across the layer rules of the design.

* ``kafka`` only under ``autoscaler/sources/``; ``kubernetes`` only under
  ``autoscaler/actuators/`` (and a lease module); ``torch`` never in ``autoscaler``;
* ``forecasting`` and ``throughput`` are leaves: they never import ``autoscaler``,
  each other, or (``throughput``) torch; torch in ``forecasting`` only under
  ``forecasting/transformer/``.

Run: ``python tools/check_layers.py`` (exit 1 and one line per violation).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (package folder, imported top-level name, folders allowed to import it, why)
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
]


def imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for pkg, name, allowed, why in RULES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if any(rel.startswith(a + "/") for a in allowed):
                continue
            if name == "kubernetes" and "lease" in path.name:
                continue
            if name in imported_names(path):
                found.append(f"{rel} imports {name}: {why}")
    return found


def main() -> int:
    found = violations()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
