"""A saved model on disk: one zip with a JSON manifest, the arrays and opaque blobs.

One format for every model (the manifest names it), written atomically (a temporary file
then ``os.replace``), so a crash mid-save never leaves a half-written model where the
controller or the CLI would load it.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from forecasting.errors import ForecastError
from forecasting.series import iso_utc

FORMAT = "kale-forecaster"
FORMAT_VERSION = 1


@dataclass
class Payload:
    """What a model saves: JSON-safe metadata, numpy arrays and opaque blobs (torch weights)."""

    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)


def write_model_file(path: str | os.PathLike[str], payload: Payload) -> None:
    """Write one file (a zip: manifest.json, arrays.npz, blobs) atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            manifest = {"format": FORMAT, "version": FORMAT_VERSION, **payload.meta}
            zf.writestr("manifest.json", json.dumps(manifest, indent=2, default=_json_default))
            buf = io.BytesIO()
            arrays: dict[str, Any] = dict(payload.arrays)  # typed as np.savez's **kwds
            np.savez(buf, **arrays)
            zf.writestr("arrays.npz", buf.getvalue())
            for name, blob in payload.blobs.items():
                zf.writestr(f"blobs/{name}", blob)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_model_file(path: str | os.PathLike[str]) -> Payload:
    """Read a file written by :func:`write_model_file`; a clear error for anything else."""
    try:
        with zipfile.ZipFile(path) as zf:
            manifest = json.loads(zf.read("manifest.json"))
            with np.load(io.BytesIO(zf.read("arrays.npz")), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            blobs = {
                n[len("blobs/") :]: zf.read(n) for n in zf.namelist() if n.startswith("blobs/")
            }
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise ForecastError(f"{path}: not a saved forecaster ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise ForecastError(f"{path}: not a saved forecaster (format {manifest.get('format')!r})")
    if int(manifest.get("version", 0)) > FORMAT_VERSION:
        raise ForecastError(f"{path}: saved by a newer version (format {manifest['version']})")
    return Payload(meta=manifest, arrays=arrays, blobs=blobs)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, pd.Timestamp):
        return iso_utc(value)
    raise TypeError(f"cannot save {type(value).__name__} in a manifest")
