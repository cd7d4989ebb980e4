"""Write manifests/grafana/kale-dashboard.json from autoscaler/controller/grafana.py.

Run: ``python -m tools.gen_dashboard`` (``--check`` exits 1 when the committed file is stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.controller.grafana import render_dashboard

ROOT = Path(__file__).resolve().parents[1]

TARGET = ROOT / "manifests" / "grafana" / "kale-dashboard.json"


def main(argv: list[str]) -> int:
    text = render_dashboard()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python -m tools.gen_dashboard")
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
