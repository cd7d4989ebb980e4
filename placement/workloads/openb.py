"""Loaders for the Alibaba GPU-cluster trace 2023 (``openb_*`` CSVs of "Beware of
Fragmentation", ATC'23).

Conventions, from the trace's README and its ``pod_csv_to_yaml.py``:

* node list ``sn,cpu_milli,memory_mib,gpu,model``: ``model`` may be empty/``nan`` for a
  CPU-only node;
* pod list ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time`` (times in seconds; ``scheduled_time`` is
  empty for pods that never ran). ``gpu_milli`` is per GPU (1000 = whole); ``gpu_spec`` is
  ``A|B`` (empty or ``nan`` = any model). For a CPU-only pod (``num_gpu == 0``) the trace's
  converter ignores ``gpu_milli`` and ``gpu_spec``, and so do we.

Every bad row raises :class:`PlacementInputError` naming ``FILE:LINE`` and the field; the
first problem stops the load (nothing is half-loaded).
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from placement.cluster import NodeSpec
from placement.errors import PlacementInputError
from placement.pod import MILLI, Pod

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "creation_time", "deletion_time", "scheduled_time")
_MISSING = {"", "nan", "NaN", "None", "null"}

T = TypeVar("T")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) pairs; the header must name every ``required`` column."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise PlacementInputError("no such file", path=str(path)) from None
    except OSError as exc:
        raise PlacementInputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise PlacementInputError(f"not a CSV file ({exc})", path=str(path), line=1) from None
        if header is None:
            raise PlacementInputError("empty file (no header)", path=str(path))
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise PlacementInputError(
                f"missing column(s) {', '.join(missing)}", path=str(path), line=1
            )
        try:
            for fields in reader:
                line = reader.line_num
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    raise PlacementInputError(
                        f"{len(fields)} fields, the header has {len(header)}",
                        path=str(path),
                        line=line,
                    )
                yield line, dict(zip(header, (f.strip() for f in fields), strict=True))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise PlacementInputError(f"unreadable row ({exc})", path=str(path)) from None


def _field(row: dict[str, str], name: str, parse: Callable[[str], T], where: tuple[str, int]) -> T:
    try:
        return parse(row[name])
    except ValueError as exc:
        raise PlacementInputError(
            f"{name}: {exc} (got {row[name]!r})", path=where[0], line=where[1]
        ) from None


def _count(text: str) -> int:
    """A non-negative integer; integral floats (``8000.0``) are accepted as pandas writes."""
    if text in _MISSING:
        raise ValueError("missing value")
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(value) or value != int(value):
        raise ValueError("not a whole number")
    if value < 0:
        raise ValueError("negative")
    return int(value)


def _time(text: str) -> float | None:
    if text in _MISSING:
        return None
    value = float(text)  # ValueError -> reported by _field
    if not math.isfinite(value):
        raise ValueError("not a finite time")
    return value


def _models(text: str) -> frozenset[str]:
    if text in _MISSING:
        return frozenset()
    return frozenset(m.strip() for m in text.split("|") if m.strip() and m.strip() not in _MISSING)


def load_nodes(path: str | Path) -> list[NodeSpec]:
    """The node list (one :class:`NodeSpec` per row, in file order)."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, NODE_COLUMNS):
        where = (str(path), line)
        name = row["sn"]
        if not name:
            raise PlacementInputError("sn: empty node name", path=str(path), line=line)
        if name in seen:
            raise PlacementInputError(
                f"sn: duplicate node {name!r} (first on line {seen[name]})",
                path=str(path),
                line=line,
            )
        seen[name] = line
        gpus = _field(row, "gpu", _count, where)
        model = "" if row["model"] in _MISSING else row["model"]
        if gpus and not model:
            raise PlacementInputError(
                "model: a node with GPUs needs a GPU model", path=str(path), line=line
            )
        nodes.append(
            NodeSpec(
                name,
                _field(row, "cpu_milli", _count, where),
                _field(row, "memory_mib", _count, where),
                gpus,
                model if gpus else "",
            )
        )
    if not nodes:
        raise PlacementInputError("no nodes in the file", path=str(path))
    return nodes


def load_pods(path: str | Path) -> list[Pod]:
    """The pod list (one :class:`Pod` per row, in file order)."""
    path = Path(path)
    pods: list[Pod] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, POD_COLUMNS):
        where = (str(path), line)
        name = row["name"]
        if not name:
            raise PlacementInputError("name: empty pod name", path=str(path), line=line)
        if name in seen:
            raise PlacementInputError(
                f"name: duplicate pod {name!r} (first on line {seen[name]})",
                path=str(path),
                line=line,
            )
        seen[name] = line
        num_gpu = _field(row, "num_gpu", _count, where)
        milli, models = 0, frozenset[str]()
        if num_gpu:
            milli = _field(row, "gpu_milli", _count, where)
            if not 0 < milli <= MILLI:
                raise PlacementInputError(
                    f"gpu_milli: must be 1..{MILLI} for a GPU pod (got {milli})",
                    path=str(path),
                    line=line,
                )
            if num_gpu > 1 and milli != MILLI:
                raise PlacementInputError(
                    f"gpu_milli: a pod with num_gpu={num_gpu} takes whole GPUs ({MILLI}), "
                    f"got {milli}",
                    path=str(path),
                    line=line,
                )
            models = _models(row.get("gpu_spec", ""))
        times = [
            _field(row, col, _time, where) if col in row else None
            for col in ("creation_time", "deletion_time", "scheduled_time")
        ]
        if times[0] is not None and times[1] is not None and times[1] < times[0]:
            raise PlacementInputError(
                f"deletion_time: {times[1]:g} is before creation_time {times[0]:g}",
                path=str(path),
                line=line,
            )
        pods.append(
            Pod(
                name,
                _field(row, "cpu_milli", _count, where),
                _field(row, "memory_mib", _count, where),
                num_gpu,
                milli,
                models,
                *times,
            )
        )
    if not pods:
        raise PlacementInputError("no pods in the file", path=str(path))
    return pods


def _write_rows(path: Path, header: tuple[str, ...], rows: list[list[object]]) -> None:
    """Write a CSV atomically (a temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _opt(value: float | None) -> str:
    """A time as the trace writes it: whole seconds without a fraction, others exactly
    (``repr``: a float reads back bit for bit; ``:g`` would keep only six digits)."""
    if value is None:
        return ""
    return str(int(value)) if value == int(value) else repr(float(value))


def write_nodes(path: str | Path, nodes: list[NodeSpec]) -> None:
    """Save nodes in the trace's node-list format (``load_nodes`` reads it back)."""
    _write_rows(
        Path(path),
        NODE_COLUMNS,
        [[n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model] for n in nodes],
    )


def write_pods(path: str | Path, pods: list[Pod]) -> None:
    """Save pods in the trace's pod-list format (qos ``LS``, phase ``Running``)."""
    header = (*POD_COLUMNS, "gpu_spec", "qos", "pod_phase", *POD_OPTIONAL[1:])
    rows: list[list[object]] = [
        [
            p.name,
            p.cpu_milli,
            p.memory_mib,
            p.num_gpu,
            p.gpu_milli,
            "|".join(sorted(p.gpu_models)),
            "LS",
            "Running",
            _opt(p.creation_time),
            _opt(p.deletion_time),
            _opt(p.scheduled_time),
        ]
        for p in pods
    ]
    _write_rows(Path(path), header, rows)
