"""Atomic file writes for the autoscaler and the trainer.

State that another process reads (a status file the dashboard polls, a trace, a measurement
or checkpoint manifest a restarted job trusts) must never be seen half-written: write a
temporary file in the same folder and ``os.replace`` it, so readers get the old file or the
new one. (``throughput`` and ``forecasting`` are leaves and keep their own copy of this.)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path next to ``path`` (its folder is created) for a writer to fill.

    On a clean exit the temporary file replaces ``path``; on any error it is removed and the
    error propagates. ``suffix``: writers that pick the format from the name (matplotlib's
    ``savefig``) need the real extension.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, fsync: bool = True, newline: str | None = None
) -> None:
    """Write ``text`` to ``path`` atomically, creating its folder.

    ``fsync``: flush the data to disk before the rename (what a crash must not lose: a
    checkpoint manifest); files rewritten every tick (a job's status) can skip it.
    ``newline``: as in :func:`open` (``""`` writes line endings exactly as given).
    """
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline=newline) as handle:
        handle.write(text)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
