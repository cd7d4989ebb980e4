"""Profiling samples: one row per measured configuration ``(workers, ps, throughput[, mode])``.

Why a hand-written CSV reader rather than ``pandas.read_csv``: a profile is typed in or pasted
together from benchmark logs, and the only useful error is the one that names the file, the
line and what is wrong with it (``p.csv:7: ps must be a positive integer, got '0'``). pandas
reports neither lines nor reasons for bad cells, and silently turns a typo into NaN.

CSV shape: a header naming ``workers``, ``ps``, ``throughput`` (samples/s) and optionally
``mode`` (``sync``/``async``), in any order. Blank lines and lines starting with ``#`` are
skipped. Repeated configurations are allowed (repeats are how noise is measured).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from throughput._io import atomic_write_text
from throughput.errors import ProfileError

MODES = ("sync", "async")
PROFILE_COLUMNS = ("workers", "ps", "throughput")
POINTS_COLUMNS = ("workers", "ps")
_HEADER_HINT = "workers,ps,throughput[,mode]"


def ps_for(workers: int, ratio: int) -> int:
    """PS count tied to ``workers`` by the production ratio: ``ceil(workers / ratio)``.

    Integer arithmetic, so it is exact for every ``workers`` (no float rounding at multiples).
    """
    return -(-workers // ratio)


@dataclass(frozen=True, eq=False)
class Profile:
    """Measured throughput samples; arrays are aligned row by row."""

    workers: np.ndarray
    """Worker count of each row (int64, ≥ 1)."""
    ps: np.ndarray
    """Parameter-server count of each row (int64, ≥ 1)."""
    throughput: np.ndarray
    """Measured throughput in samples/s (float64, > 0, finite)."""
    modes: tuple[str | None, ...] = ()
    """Per-row training mode, ``None`` where the file did not say; empty means all ``None``."""
    lines: tuple[int, ...] = ()
    """1-based line number of each row in ``source`` (empty for in-memory profiles)."""
    source: str = "<memory>"
    """Where the rows came from, for messages."""
    _config_cache: dict[str, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_arrays(
        cls,
        workers: Sequence[int] | np.ndarray,
        ps: Sequence[int] | np.ndarray,
        throughput: Sequence[float] | np.ndarray,
        *,
        modes: Sequence[str | None] | None = None,
        source: str = "<memory>",
    ) -> Profile:
        """Build a validated profile from arrays (the programmatic twin of :func:`load_profile`)."""
        w = np.asarray(workers)
        p = np.asarray(ps)
        f = np.asarray(throughput, dtype=float)
        if not (w.ndim == p.ndim == f.ndim == 1) or not (len(w) == len(p) == len(f)):
            raise ProfileError(f"{source}: workers, ps and throughput must be 1-D and equally long")
        if len(w) == 0:
            raise ProfileError(f"{source}: no rows")
        for name, arr in (("workers", w), ("ps", p)):
            if not np.all(np.isfinite(arr.astype(float))) or np.any(arr != np.round(arr)):
                raise ProfileError(f"{source}: {name} must be whole numbers")
            if np.any(arr < 1):
                raise ProfileError(f"{source}: {name} must be positive integers")
        if not np.all(np.isfinite(f)) or np.any(f <= 0):
            raise ProfileError(f"{source}: throughput must be positive and finite")
        mode_tuple: tuple[str | None, ...] = ()
        if modes is not None:
            mode_tuple = tuple(modes)
            if len(mode_tuple) != len(w):
                raise ProfileError(f"{source}: modes must have one entry per row")
            bad = [m for m in mode_tuple if m is not None and m not in MODES]
            if bad:
                raise ProfileError(f"{source}: mode must be 'sync' or 'async', got {bad[0]!r}")
        return cls(
            workers=w.astype(np.int64),
            ps=p.astype(np.int64),
            throughput=f.astype(np.float64),
            modes=mode_tuple,
            source=source,
        )

    def __len__(self) -> int:
        return int(self.workers.shape[0])

    def mode_of(self, i: int) -> str | None:
        """Mode of row ``i`` (``None`` when unspecified)."""
        return self.modes[i] if self.modes else None

    def select(self, mask: np.ndarray) -> Profile:
        """The rows where ``mask`` is true (or the rows at the given integer indices)."""
        idx = np.flatnonzero(mask) if np.asarray(mask).dtype == bool else np.asarray(mask)
        return Profile(
            workers=self.workers[idx],
            ps=self.ps[idx],
            throughput=self.throughput[idx],
            modes=tuple(self.modes[i] for i in idx) if self.modes else (),
            lines=tuple(self.lines[i] for i in idx) if self.lines else (),
            source=self.source,
        )

    def for_mode(self, mode: str) -> Profile:
        """Rows measured in ``mode`` plus rows that do not say; an error when none are left.

        A profile may hold sync and async measurements of the same job; fitting one mode must
        never silently mix in the other's rows.
        """
        if mode not in MODES:
            raise ProfileError(f"mode must be 'sync' or 'async', got {mode!r}")
        if not self.modes:
            return self
        keep = np.array([m is None or m == mode for m in self.modes], dtype=bool)
        if not keep.any():
            found = sorted({m for m in self.modes if m is not None})
            raise ProfileError(
                f"{self.source}: no rows with mode={mode} (the file has {', '.join(found)})"
            )
        return self if keep.all() else self.select(keep)

    def on_ratio(self, ratio: int) -> np.ndarray:
        """Boolean mask of rows whose ps equals ``ceil(workers / ratio)``."""
        mask: np.ndarray = self.ps == -(-self.workers // int(ratio))
        return mask

    def config_ids(self) -> np.ndarray:
        """Index of each row's (workers, ps) configuration: repeats share one id."""
        if "ids" not in self._config_cache:
            pairs = np.stack([self.workers, self.ps], axis=1)
            _, ids = np.unique(pairs, axis=0, return_inverse=True)
            self._config_cache["ids"] = ids.reshape(-1)
        return self._config_cache["ids"]

    @property
    def n_configs(self) -> int:
        """Number of distinct (workers, ps) configurations."""
        ids = self.config_ids()
        return int(ids.max()) + 1 if len(ids) else 0


# ---------------------------------------------------------------------------------------------
# Reading


def _open_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a directory, expected a CSV file") from None
    except PermissionError:
        raise ProfileError(f"{path}: permission denied") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not a UTF-8 text file (byte {exc.start})") from None


def _rows(
    path: Path, required: Sequence[str], optional: Sequence[str], hint: str
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line, {column: text})`` for each data row, validating the header first."""
    text = _open_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    header_line = 0
    seen_rows = 0
    try:
        for record in reader:
            line = reader.line_num
            if not record or all(not cell.strip() for cell in record):
                continue
            if record[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [cell.strip().lower() for cell in record]
                header_line = line
                _check_header(path, line, header, required, optional, hint)
                continue
            if len(record) != len(header):
                raise ProfileError(
                    f"{path}:{line}: expected {len(header)} fields ({','.join(header)}), "
                    f"got {len(record)}"
                )
            seen_rows += 1
            yield line, {name: cell.strip() for name, cell in zip(header, record, strict=True)}
    except csv.Error as exc:
        raise ProfileError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
    if header is None:
        raise ProfileError(f"{path}:1: empty file; expected a header line '{hint}'")
    if seen_rows == 0:
        raise ProfileError(f"{path}:{header_line}: no data rows after the header")


def _check_header(
    path: Path,
    line: int,
    header: list[str],
    required: Sequence[str],
    optional: Sequence[str],
    hint: str,
) -> None:
    allowed = (*required, *optional)
    for name in header:
        if header.count(name) > 1:
            raise ProfileError(f"{path}:{line}: column '{name}' appears twice")
    for name in header:
        if name not in allowed:
            shown = name if name else "(empty)"
            raise ProfileError(
                f"{path}:{line}: unknown column '{shown}' (expected header '{hint}')"
            )
    for name in required:
        if name not in header:
            raise ProfileError(f"{path}:{line}: missing column '{name}' (expected header '{hint}')")


def _positive_int(path: Path, line: int, name: str, text: str) -> int:
    if text == "":
        raise ProfileError(f"{path}:{line}: {name} is empty, expected a positive integer")
    try:
        value = float(text)
    except ValueError:
        raise ProfileError(
            f"{path}:{line}: {name} must be a positive integer, got {text!r}"
        ) from None
    if not math.isfinite(value) or value != int(value):
        raise ProfileError(f"{path}:{line}: {name} must be a positive integer, got {text!r}")
    if value < 1:
        raise ProfileError(f"{path}:{line}: {name} must be a positive integer, got {text!r}")
    return int(value)


def _positive_float(path: Path, line: int, name: str, text: str) -> float:
    if text == "":
        raise ProfileError(f"{path}:{line}: {name} is empty, expected samples/s > 0")
    try:
        value = float(text)
    except ValueError:
        raise ProfileError(
            f"{path}:{line}: {name} must be a number (samples/s), got {text!r}"
        ) from None
    if not math.isfinite(value):
        raise ProfileError(f"{path}:{line}: {name} must be finite, got {text!r}")
    if value <= 0:
        raise ProfileError(f"{path}:{line}: {name} must be positive (samples/s), got {text!r}")
    return value


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read a profile CSV; raise :class:`ProfileError` naming ``FILE:LINE: reason`` on bad input."""
    p = Path(path)
    workers: list[int] = []
    ps: list[int] = []
    thr: list[float] = []
    modes: list[str | None] = []
    lines: list[int] = []
    has_mode = False
    for line, row in _rows(p, PROFILE_COLUMNS, ("mode",), _HEADER_HINT):
        workers.append(_positive_int(p, line, "workers", row["workers"]))
        ps.append(_positive_int(p, line, "ps", row["ps"]))
        thr.append(_positive_float(p, line, "throughput", row["throughput"]))
        if "mode" in row:
            has_mode = True
            mode = row["mode"].lower()
            if mode and mode not in MODES:
                raise ProfileError(
                    f"{p}:{line}: mode must be 'sync' or 'async' (or empty), got {row['mode']!r}"
                )
            modes.append(mode or None)
        lines.append(line)
    return Profile(
        workers=np.asarray(workers, dtype=np.int64),
        ps=np.asarray(ps, dtype=np.int64),
        throughput=np.asarray(thr, dtype=np.float64),
        modes=tuple(modes) if has_mode and any(m is not None for m in modes) else (),
        lines=tuple(lines),
        source=str(p),
    )


def load_points(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a ``workers[,ps]`` CSV of configurations to predict; ``ps`` is ``None`` if absent.

    Without a ps column the model ties ps to workers by its ratio.
    """
    p = Path(path)
    workers: list[int] = []
    ps: list[int] = []
    has_ps: bool | None = None
    for line, row in _rows(p, ("workers",), ("ps",), "workers,ps"):
        workers.append(_positive_int(p, line, "workers", row["workers"]))
        if has_ps is None:
            has_ps = "ps" in row
        if has_ps:
            ps.append(_positive_int(p, line, "ps", row["ps"]))
    w = np.asarray(workers, dtype=np.int64)
    return w, (np.asarray(ps, dtype=np.int64) if has_ps else None)


# ---------------------------------------------------------------------------------------------
# Writing


def profile_to_csv(profile: Profile) -> str:
    """CSV text of ``profile`` (with a mode column when any row has a mode)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    with_mode = bool(profile.modes)
    writer.writerow([*PROFILE_COLUMNS, "mode"] if with_mode else list(PROFILE_COLUMNS))
    for i in range(len(profile)):
        row: list[object] = [
            int(profile.workers[i]),
            int(profile.ps[i]),
            repr(float(profile.throughput[i])),
        ]
        if with_mode:
            row.append(profile.mode_of(i) or "")
        writer.writerow(row)
    return out.getvalue()


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` as CSV, atomically."""
    atomic_write_text(path, profile_to_csv(profile))
