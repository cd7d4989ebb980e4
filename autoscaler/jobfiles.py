"""The files a job refers to: its throughput model and its rescale measurement.

Why more than ``is_file()``: a job chooses these paths, and the controller reads them with its
own permissions. ``throughput.model: /etc/passwd`` used to pass because only existence was
checked; a FIFO or ``/dev/zero`` would hang or fill memory on read. A referenced file must
be a regular file of bounded size with the expected extension and format and, where the
platform names a root (cluster mode: the mounted models directory), resolve — symlinks
followed — inside that root.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.jobrules import Problem

if TYPE_CHECKING:
    from autoscaler.config import LoadedJob

MODEL_FORMAT = "kale.throughput/v1"
"""What ``kale throughput fit`` writes (``throughput.model.FORMAT``; not imported: numpy)."""
MAX_FILE_BYTES = 1024 * 1024
"""A fitted model is ~2 KB, a rescale measurement less."""


def outside_root(path: Path, root: Path) -> bool:
    """True when ``path`` (symlinks resolved) is not inside ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return True
    return False


def read_json_file(path: Path) -> tuple[Any, str | None]:
    """(parsed JSON, None) or (None, why not): regular file, ≤ 1 MiB, ``.json``, valid JSON."""
    if path.suffix.lower() != ".json":
        return None, f"{path} is not a .json file"
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, f"file not found: {path}"
    except (OSError, ValueError) as exc:
        return None, f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(st.st_mode):
        return None, f"{path} is a directory, expected a JSON file"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{path} is not a regular file"
    if st.st_size > MAX_FILE_BYTES:
        return None, f"{path} is {st.st_size} bytes; at most {MAX_FILE_BYTES} are accepted"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        data = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"{path} is not valid JSON ({str(exc).splitlines()[0][:100]})"
    return data, None


def file_problems(loaded: LoadedJob, *, root: Path | None = None) -> list[Problem]:
    """The model and measurement files must exist, be what they claim, and stay in ``root``."""
    job = loaded.job
    out: list[Problem] = []
    model = loaded.throughput_model_path
    if root is not None and outside_root(model, root):
        out.append(
            (
                "spec.throughput.model",
                f"{model} is outside the models directory {root} (the platform's policy)",
            )
        )
    else:
        data, why = read_json_file(model)
        if why is not None:
            out.append(("spec.throughput.model", why))
        elif not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            out.append(
                (
                    "spec.throughput.model",
                    f"{model} is not a throughput model (expected JSON with "
                    f'"format": "{MODEL_FORMAT}", written by `kale throughput fit`)',
                )
            )
    meas = job.spec.rescale.measurement
    if meas is not None:
        mpath = loaded.resolve(meas)
        if root is not None and outside_root(mpath, root):
            out.append(
                (
                    "spec.rescale.measurement",
                    f"{mpath} is outside the models directory {root} (the platform's policy)",
                )
            )
        else:
            data, why = read_json_file(mpath)
            if why is not None:
                out.append(("spec.rescale.measurement", why))
            elif not isinstance(data, dict):
                out.append(("spec.rescale.measurement", f"{mpath} is not a JSON object"))
    return out
