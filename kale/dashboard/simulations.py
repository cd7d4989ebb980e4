"""Saved ``kale simulate --json`` results as the dashboard shows them: listed, re-read on change.

Why a module of its own: simulations are files a person passes on the command line, not the
controller's state directory that :mod:`kale.dashboard.data` reads; a file that is not
a simulation result is listed with its error rather than breaking the page, and NaN/inf
(which strict JSON cannot carry) are sent as null.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class SimulationFiles:
    """Saved ``kale simulate --json`` results, re-read when a file changes."""

    def __init__(self, paths: list[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self._cache: dict[Path, tuple[int, dict[str, Any] | None, str | None]] = {}

    def _load(self, path: Path) -> tuple[dict[str, Any] | None, str | None]:
        try:
            stamp = path.stat().st_mtime_ns
        except OSError as exc:
            return None, f"cannot read: {exc.strerror or exc}"
        hit = self._cache.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        data: dict[str, Any] | None = None
        error: str | None = None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict) or not isinstance(raw.get("policies"), dict):
                error = 'not a `kale simulate --json` result (no "policies" object)'
            else:
                data = raw
        except (OSError, ValueError) as exc:
            error = f"cannot parse: {exc}"
        self._cache[path] = (stamp, data, error)
        return data, error

    def index(self) -> dict[str, Any]:
        out = []
        for i, path in enumerate(self.paths):
            data, error = self._load(path)
            out.append(
                {
                    "id": i,
                    "name": path.name,
                    "path": str(path),
                    "error": error,
                    "title": (data or {}).get("title") or path.stem,
                    "policies": sorted((data or {}).get("policies", {})),
                }
            )
        return {"simulations": out}

    def get(self, sim_id: int) -> dict[str, Any] | None:
        if not 0 <= sim_id < len(self.paths):
            return None
        data, error = self._load(self.paths[sim_id])
        if data is None:
            return {"id": sim_id, "name": self.paths[sim_id].name, "error": error}
        return {"id": sim_id, "name": self.paths[sim_id].name, "error": None, **_finite(data)}


def _finite(value: Any) -> Any:
    """NaN/inf (which strict JSON cannot carry) become None."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
