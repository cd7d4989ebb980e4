"""Write manifests/release.yaml: the kustomize base rendered, the file users apply.

Run: ``python -m tools.gen_release`` (or ``make release``); ``--check`` exits 1 when the
committed file differs from ``kubectl kustomize manifests`` (a test does the same).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "manifests" / "release.yaml"
HEADER = (
    "# Kale's release manifest: `kubectl kustomize manifests` (do not edit; regenerate with\n"
    "# `make release`). Install: kubectl apply --server-side -f manifests/release.yaml\n"
)


def render() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("gen_release: kubectl (with its built-in kustomize) is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"gen_release: kubectl kustomize failed: {out.stderr.strip()}")
    return HEADER + out.stdout


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run `make release`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
