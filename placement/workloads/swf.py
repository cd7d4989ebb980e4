"""Standard Workload Format (SWF) loader: the Parallel Workloads Archive's job logs.

SWF is the lingua franca of batch-scheduling research (RLScheduler's Lublin and real HPC
logs): one job per line, 18 whitespace-separated numeric fields, ``;`` comment lines (the
header's ``; MaxNodes: 256`` lines say how big the machine was), and ``-1`` meaning
"unknown". The loader checks every row and stops at the first bad one with
``FILE:LINE: reason``, so a truncated or hand-edited log never turns silently into a
different workload. It keeps the log's order and every field; the protocols that consume it
(``placement.queue.rlscheduler``, ``placement.timed``) decide what to drop or default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from placement.errors import PlacementInputError

UNKNOWN = -1
"""SWF's marker for a field the log does not know."""

FIELD_NAMES: tuple[str, ...] = (
    "job_id",
    "submit_s",
    "wait_s",
    "run_s",
    "allocated_procs",
    "avg_cpu_s",
    "used_memory_kb",
    "requested_procs",
    "requested_time_s",
    "requested_memory_kb",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time_s",
)
"""The 18 SWF fields in file order (names follow the archive's definitions)."""

# Fields that are counts or ids: a fractional value there is a corrupt row, not a measurement.
_INTEGRAL = frozenset(FIELD_NAMES) - {"submit_s", "wait_s", "run_s", "avg_cpu_s", "think_time_s"}
# Fields where any negative value other than -1 (unknown) is meaningless.
_NON_NEGATIVE = frozenset(FIELD_NAMES) - {"think_time_s"}


@dataclass(frozen=True)
class SwfJob:
    """One SWF row; times in seconds, ``-1`` where the log does not know the value."""

    job_id: int
    submit_s: float
    wait_s: float
    run_s: float
    allocated_procs: int
    avg_cpu_s: float
    used_memory_kb: int
    requested_procs: int
    requested_time_s: float
    requested_memory_kb: int
    status: int
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time_s: float
    line: int = 0
    """The file line the job came from (for messages about it later)."""


@dataclass(frozen=True)
class SwfTrace:
    """A loaded SWF log: its jobs in file order and its ``; Key: value`` header."""

    path: str
    jobs: tuple[SwfJob, ...]
    header: dict[str, str] = field(default_factory=dict)

    @property
    def max_nodes(self) -> int | None:
        """``MaxNodes`` from the header, if the log states it."""
        return _header_int(self.header, "MaxNodes")

    @property
    def max_procs(self) -> int | None:
        """``MaxProcs`` from the header, if the log states it."""
        return _header_int(self.header, "MaxProcs")

    @property
    def processors(self) -> int | None:
        """The machine's processor count: MaxProcs, else MaxNodes (models often give only one)."""
        return self.max_procs or self.max_nodes


def _header_int(header: dict[str, str], key: str) -> int | None:
    value = header.get(key)
    return int(value) if value is not None else None


def _parse_number(token: str, name: str, path: str, line: int) -> float:
    try:
        value = float(token)
    except ValueError:
        raise PlacementInputError(
            f"{name}: {token!r} is not a number", path=path, line=line
        ) from None
    if not math.isfinite(value):
        raise PlacementInputError(f"{name}: {token!r} is not a finite number", path=path, line=line)
    if name in _INTEGRAL and value != int(value):
        raise PlacementInputError(f"{name}: {token!r} must be a whole number", path=path, line=line)
    if name in _NON_NEGATIVE and value < 0 and value != UNKNOWN:
        raise PlacementInputError(
            f"{name}: {token} is negative (only -1, 'unknown', is allowed)", path=path, line=line
        )
    return value


def parse_job(text: str, *, path: str, line: int) -> SwfJob:
    """Parse one data row; raise :class:`PlacementInputError` naming ``path:line`` if bad."""
    tokens = text.split()
    if len(tokens) != len(FIELD_NAMES):
        raise PlacementInputError(
            f"expected {len(FIELD_NAMES)} fields, found {len(tokens)}", path=path, line=line
        )
    values = {
        name: _parse_number(token, name, path, line)
        for name, token in zip(FIELD_NAMES, tokens, strict=True)
    }
    if values["job_id"] < 1:
        raise PlacementInputError(f"job_id: {tokens[0]} must be 1 or more", path=path, line=line)
    if values["submit_s"] == UNKNOWN:
        raise PlacementInputError(
            "submit_s: unknown (-1); every job needs a submit time", path=path, line=line
        )
    typed = {name: int(v) if name in _INTEGRAL else v for name, v in values.items()}
    return SwfJob(**typed, line=line)


def _parse_header(text: str, header: dict[str, str], *, path: str, line: int) -> None:
    body = text.lstrip(";").strip()
    key, sep, value = body.partition(":")
    if not sep:
        return  # free-text comment
    key, value = key.strip(), value.strip()
    if key in ("MaxNodes", "MaxProcs"):
        try:
            count = int(value)
        except ValueError:
            raise PlacementInputError(
                f"{key}: {value!r} is not a whole number", path=path, line=line
            ) from None
        if count < 1:
            raise PlacementInputError(f"{key}: {count} must be 1 or more", path=path, line=line)
        value = str(count)
    header.setdefault(key, value)


def load_swf(path: str | Path) -> SwfTrace:
    """Load an SWF file; every row is checked, the first bad one raises ``FILE:LINE: reason``."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlacementInputError("no such file", path=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlacementInputError(f"cannot read: {exc}", path=name) from None
    header: dict[str, str] = {}
    jobs: list[SwfJob] = []
    seen: dict[int, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith(";"):
            _parse_header(stripped, header, path=name, line=number)
            continue
        job = parse_job(stripped, path=name, line=number)
        if job.job_id in seen:
            raise PlacementInputError(
                f"job_id: {job.job_id} repeats line {seen[job.job_id]}", path=name, line=number
            )
        seen[job.job_id] = number
        jobs.append(job)
    if not jobs:
        raise PlacementInputError("no jobs (only comments or blank lines)", path=name)
    return SwfTrace(path=name, jobs=tuple(jobs), header=header)
