"""Write manifests/crd/elastictrainingjobs.yaml from the pydantic models.

Run: ``python -m tools.gen_crd`` (``--check`` exits 1 when the committed file is stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

from autoscaler.job.crd import render_crd

ROOT = Path(__file__).resolve().parents[1]

TARGET = ROOT / "manifests" / "crd" / "elastictrainingjobs.yaml"


def main(argv: list[str]) -> int:
    text = render_crd()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(
                f"{TARGET.relative_to(ROOT)} is stale: run python -m tools.gen_crd", file=sys.stderr
            )
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
