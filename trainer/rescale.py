"""The measured rescale duration: the JSON ``kale profile`` writes and ``rescale: auto`` reads.

Why this module exists: the planner must know how long a resize stops the job (the downtime
D of the simulation semantics). Guessing D is how reactive scalers end up late; ``kale
profile`` measures it by resizing the real trainer several times, and a job that says
``rescale: {duration: auto, measurement: FILE}`` plans with the median it found.

Format ``kale.rescale/v1``::

    {"format": "kale.rescale/v1",
     "median_s": 4.2, "max_s": 5.0,             # of the samples' total_s
     "samples": [{"from_workers": 1, "from_ps": 1, "to_workers": 2, "to_ps": 1,
                  "total_s": 4.1, "stop_s": .., "checkpoint_s": .., "start_s": ..,
                  "load_s": .., "stream_rebuild_s": ..}, ...],
     "phases": {"checkpoint_s": .., "stop_s": .., "start_s": .., "load_s": ..,
                "stream_rebuild_s": ..},          # median of each phase over the samples
     "measured_at": "2026-11-23T10:00:00Z", "host": "...", "mode": "sync"}

The phases partition each sample's total: stop (drain the in-flight step, commit, leave
the group; then the PS processes exit) + checkpoint (PS shards written, manifest replaced)
+ start (new processes up and connected) + load (PS shards restored) + stream rebuild
(consumer group rejoined, every partition assigned, first step done).

No torch and no kafka here: the autoscaler's config resolution imports this module.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.atomic import atomic_write_text
from common.errors import UserError

FORMAT = "kale.rescale/v1"
PHASES = ("stop_s", "checkpoint_s", "start_s", "load_s", "stream_rebuild_s")


@dataclass(frozen=True, slots=True)
class ResizeTiming:
    """How long one resize took, phase by phase (seconds; the phases sum to ``total_s``)."""

    from_workers: int
    from_ps: int
    to_workers: int
    to_ps: int
    stop_s: float
    """Drain (finish the in-flight step, commit, leave the group) plus PS exit."""
    checkpoint_s: float
    """PS shards written atomically and the manifest replaced."""
    start_s: float
    """New processes started and connected (gloo rendezvous)."""
    load_s: float
    """PS shards restored from the checkpoint."""
    stream_rebuild_s: float
    """Consumer group rejoined, all partitions assigned, first step done on each worker."""

    @property
    def total_s(self) -> float:
        return self.stop_s + self.checkpoint_s + self.start_s + self.load_s + self.stream_rebuild_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_s": self.total_s}


@dataclass(frozen=True)
class RescaleMeasurement:
    """Several measured resizes and their summary (what the JSON file holds)."""

    samples: tuple[ResizeTiming, ...]
    mode: str | None = None
    measured_at: str | None = None
    host: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a rescale measurement needs at least one resize")

    @property
    def median_s(self) -> float:
        return float(statistics.median(s.total_s for s in self.samples))

    @property
    def max_s(self) -> float:
        return float(max(s.total_s for s in self.samples))

    @property
    def phases(self) -> dict[str, float]:
        """Median of each phase over the samples."""
        return {
            name: float(statistics.median(getattr(s, name) for s in self.samples))
            for name in PHASES
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "median_s": self.median_s,
            "max_s": self.max_s,
            "samples": [s.as_dict() for s in self.samples],
            "phases": self.phases,
            "mode": self.mode,
            "measured_at": self.measured_at,
            "host": self.host,
            **dict(self.extra),
        }


def save_rescale_measurement(measurement: RescaleMeasurement, path: str | os.PathLike[str]) -> None:
    """Write the ``kale.rescale/v1`` JSON atomically."""
    atomic_write_text(path, json.dumps(measurement.as_dict(), indent=2) + "\n")


def _number(path: Path, data: Mapping[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{path}: {key} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{path}: {key} must be a positive number of seconds, got {value!r}")
    return float(value)


def read_rescale_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The validated JSON document (``format``, positive ``median_s`` and ``max_s``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: file not found (write it with `kale profile`)") from None
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, expected a rescale JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: expected a JSON object ({FORMAT})")
    if data.get("format") != FORMAT:
        raise UserError(f"{p}: format must be {FORMAT!r}, got {data.get('format')!r}")
    median = _number(p, data, "median_s")
    maximum = _number(p, data, "max_s")
    if maximum < median:
        raise UserError(f"{p}: max_s ({maximum:g}) is below median_s ({median:g})")
    return data


def load_rescale_measurement(path: str | os.PathLike[str]) -> float:
    """The median rescale duration (seconds) recorded in a ``kale.rescale/v1`` file.

    Raises :class:`UserError` (one line naming the file) when the file is missing or bad.
    """
    return float(read_rescale_json(path)["median_s"])


def summarize(samples: Sequence[ResizeTiming]) -> dict[str, float]:
    """Median and max total plus the median of each phase (for tables and logs)."""
    m = RescaleMeasurement(tuple(samples))
    return {"median_s": m.median_s, "max_s": m.max_s, **m.phases}
