"""Reading the files a job refers to (its throughput model and rescale measurement), safely.

Why more than ``is_file()``: a job chooses these paths, and the controller reads them with its
own permissions. ``throughput.model: /etc/passwd`` exists but is no model, and a FIFO or
``/dev/zero`` would hang or fill memory on read. A referenced file must
be a regular file of bounded size with the expected extension and format and, where the
platform names a root (cluster mode: the mounted models directory), resolve — symlinks
followed — inside that root.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

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
