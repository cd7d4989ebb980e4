"""A fitted throughput model: family + θ + the context needed to use it safely.

The model is what the planner holds. Beyond θ it records the global batch M and the
workers-per-PS ratio (p is always ceil(w / ratio) when the planner asks), the range of the
profile it was fitted on (predictions far outside it warn), the allowed worker range (the
peak is the argmax *within* it), and the fit metrics so a reviewer can see how much to trust
it. Saved files are JSON tagged ``"format": "kale.throughput/v1"``, written atomically.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np

from throughput._io import atomic_write_text
from throughput.capacity import CapacityTable
from throughput.errors import ExtrapolationWarning, ModelFileError, ThroughputError
from throughput.families import Family, get_family

FORMAT = "kale.throughput/v1"
MAX_TABLE_SPAN = 1_000_000
"""Largest worker range a capacity table may cover (a guard against typos like 1e9)."""

TRUST_LOW = 0.5
TRUST_HIGH = 2.0
"""Predictions for w outside [TRUST_LOW × profiled min, TRUST_HIGH × profiled max] warn."""


@dataclass(frozen=True)
class ProfileRange:
    """What the model was fitted on: the edges of the profile."""

    workers_min: int
    """Smallest profiled worker count."""
    workers_max: int
    """Largest profiled worker count."""
    ps_min: int
    """Smallest profiled PS count."""
    ps_max: int
    """Largest profiled PS count."""
    throughput_min: float
    """Smallest measured throughput (samples/s)."""
    throughput_max: float
    """Largest measured throughput (samples/s)."""
    n_points: int
    """Rows used (repeats counted)."""
    n_configs: int
    """Distinct (workers, ps) configurations."""

    @property
    def trusted_workers(self) -> tuple[float, float]:
        """Worker counts the model may be used at without an extrapolation warning."""
        return TRUST_LOW * self.workers_min, TRUST_HIGH * self.workers_max


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ThroughputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True, eq=False)
class ThroughputModel:
    """f(w, p): predicted samples/s of the job with w workers and p parameter servers."""

    family: str
    """Family name (see :mod:`throughput.families`)."""
    mode: str
    """``sync`` or ``async``."""
    theta: tuple[float, ...]
    """Non-negative coefficients, one per family term."""
    global_batch: float
    """Global batch M (samples per synchronous step); kept constant while scaling."""
    ratio: int
    """Workers per PS: the planner always uses p = ceil(w / ratio)."""
    min_workers: int = 1
    """Smallest allowed worker count (the lower edge of the peak search)."""
    max_workers: int = 1000
    """Largest allowed worker count: the peak is the argmax over [min_workers, max_workers]."""
    profile_range: ProfileRange | None = None
    """Edges of the profile the model was fitted on (None for hand-made models)."""
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    """Fit metrics: ``mape`` and ``cv_mape`` in percent, ``r2``, row and configuration counts."""
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Cross-validation table of every family tried, by name."""
    _tables: dict[tuple[int, int], CapacityTable] = field(
        default_factory=dict, init=False, repr=False
    )
    _fam: Family = field(init=False, repr=False)
    _theta_arr: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        fam = get_family(self.mode, self.family)
        theta = tuple(float(t) for t in self.theta)
        if len(theta) != fam.n_params:
            raise ThroughputError(
                f"family {self.mode}/{self.family} takes {fam.n_params} coefficients "
                f"({fam.formula()}), got {len(theta)}"
            )
        if not all(math.isfinite(t) and t >= 0 for t in theta):
            raise ThroughputError(f"theta must be finite and non-negative, got {list(theta)}")
        if not any(t > 0 for t in theta):
            raise ThroughputError("theta must have at least one positive coefficient")
        if not (math.isfinite(self.global_batch) and self.global_batch > 0):
            raise ThroughputError(f"global_batch must be positive, got {self.global_batch!r}")
        lo = _positive_int(self.min_workers, "min_workers")
        hi = _positive_int(self.max_workers, "max_workers")
        if lo > hi:
            raise ThroughputError(f"min_workers ({lo}) must not exceed max_workers ({hi})")
        object.__setattr__(self, "theta", theta)
        object.__setattr__(self, "ratio", _positive_int(self.ratio, "ratio"))
        object.__setattr__(self, "global_batch", float(self.global_batch))
        object.__setattr__(self, "_fam", fam)
        object.__setattr__(self, "_theta_arr", np.asarray(theta, dtype=np.float64))

    # -- prediction -------------------------------------------------------------------------

    @property
    def family_spec(self) -> Family:
        """The :class:`Family` object (formula, terms, whether it uses p)."""
        return self._fam

    def ps_for(self, workers: int) -> int:
        """p tied to ``workers`` by the ratio: ceil(workers / ratio), in exact integers."""
        return -(-int(workers) // self.ratio)

    def _predict(self, w: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Vectorised prediction with a fixed summation order.

        Column by column, not ``X @ θ``: BLAS may block or fuse differently for different
        lengths, and the solver relies on f(w) being bit-identical whether computed alone or
        inside a table.
        """
        fam = self.family_spec
        x = fam.design(w, p, self.global_batch)
        theta = self._theta_arr
        denom = x[:, 0] * theta[0]
        for j in range(1, x.shape[1]):
            denom = denom + x[:, j] * theta[j]
        out: np.ndarray = fam.numer(w, self.global_batch) / denom
        return out

    @overload
    def throughput(self, workers: int, ps: int | None = None, *, warn: bool = True) -> float: ...

    @overload
    def throughput(
        self,
        workers: np.ndarray | list[int],
        ps: np.ndarray | list[int] | None = None,
        *,
        warn: bool = True,
    ) -> np.ndarray: ...

    def throughput(
        self,
        workers: int | np.ndarray | list[int],
        ps: int | np.ndarray | list[int] | None = None,
        *,
        warn: bool = True,
    ) -> float | np.ndarray:
        """Predicted samples/s at ``workers`` (and ``ps``; default ceil(w / ratio)).

        Scalars in, float out; arrays in, array out. Warns (:class:`ExtrapolationWarning`)
        when a worker count lies far outside the profiled range, and when a fixed-ratio family
        is given a p it cannot honour.
        """
        scalar = np.ndim(workers) == 0 and (ps is None or np.ndim(ps) == 0)
        w = np.atleast_1d(np.asarray(workers))
        if w.size and (not np.all(np.isfinite(w.astype(float))) or np.any(w < 1)):
            raise ThroughputError("workers must be ≥ 1")
        w = w.astype(np.int64)
        tied = -(-w // self.ratio)
        if ps is None:
            p = tied
        else:
            p = np.broadcast_to(np.atleast_1d(np.asarray(ps)), w.shape)
            if p.size and np.any(p < 1):
                raise ThroughputError("ps must be ≥ 1")
            p = p.astype(np.int64)
            if warn and not self.family_spec.uses_ps and np.any(p != tied):
                warnings.warn(
                    f"family {self.family} assumes ps = ceil(workers/{self.ratio}); "
                    "the given ps is ignored",
                    ExtrapolationWarning,
                    stacklevel=2,
                )
        if warn:
            self._warn_outside(int(w.min()), int(w.max()))
        out = self._predict(w.astype(np.float64), p.astype(np.float64))
        return float(out[0]) if scalar else out

    def _warn_outside(self, lo: int, hi: int) -> None:
        if self.profile_range is None:
            return
        t_lo, t_hi = self.profile_range.trusted_workers
        if lo < t_lo or hi > t_hi:
            r = self.profile_range
            worst = lo if lo < t_lo else hi
            warnings.warn(
                f"predicting at {worst} workers, far outside the profiled range "
                f"{r.workers_min}–{r.workers_max} workers; profile that range before relying on it",
                ExtrapolationWarning,
                stacklevel=3,
            )

    # -- capacity table and peak -----------------------------------------------------------

    def capacity_table(self, lo: int | None = None, hi: int | None = None) -> CapacityTable:
        """f(w, ceil(w/ratio)) for every w in [lo, hi] (default: the model's allowed range).

        Cached per range, so the solver pays for it once.
        """
        lo = self.min_workers if lo is None else lo
        hi = self.max_workers if hi is None else hi
        key = (lo, hi)
        table = self._tables.get(key)
        if table is not None:
            return table
        lo_i = _positive_int(lo, "min_workers")
        hi_i = _positive_int(hi, "max_workers")
        if lo_i > hi_i:
            raise ThroughputError(f"min_workers ({lo_i}) must not exceed max_workers ({hi_i})")
        if hi_i - lo_i > MAX_TABLE_SPAN:
            raise ThroughputError(f"worker range {lo_i}–{hi_i} is too wide (> {MAX_TABLE_SPAN})")
        self._warn_outside(lo_i, hi_i)
        w = np.arange(lo_i, hi_i + 1, dtype=np.int64)
        p = -(-w // self.ratio)
        f = self._predict(w.astype(np.float64), p.astype(np.float64))
        table = CapacityTable.build(lo_i, hi_i, f, p)
        if len(self._tables) > 64:  # bound the cache; ranges rarely change
            self._tables.clear()
        self._tables[key] = table
        return table

    @property
    def peak_workers(self) -> int:
        """argmax of f(w, ceil(w/ratio)) over [min_workers, max_workers] (first one on ties)."""
        return self.capacity_table().peak_workers

    @property
    def peak_throughput(self) -> float:
        """f at :attr:`peak_workers`: no allowed configuration serves more."""
        return self.capacity_table().peak_throughput

    @property
    def peak_at_range_edge(self) -> bool:
        """True when f still rises at max_workers (async families do): the peak is the cap."""
        return self.peak_workers == self.max_workers

    def with_range(self, min_workers: int, max_workers: int) -> ThroughputModel:
        """A copy allowed over another worker range (the peak moves with it)."""
        return ThroughputModel(
            family=self.family,
            mode=self.mode,
            theta=self.theta,
            global_batch=self.global_batch,
            ratio=self.ratio,
            min_workers=min_workers,
            max_workers=max_workers,
            profile_range=self.profile_range,
            metrics=dict(self.metrics),
            candidates=dict(self.candidates),
        )

    # -- persistence -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``peak_*`` and ``formula`` are informational (recomputed on load)."""
        return {
            "format": FORMAT,
            "family": self.family,
            "mode": self.mode,
            "formula": self.family_spec.formula(),
            "theta": list(self.theta),
            "global_batch": self.global_batch,
            "ratio": self.ratio,
            "min_workers": self.min_workers,
            "max_workers": self.max_workers,
            "peak_workers": self.peak_workers,
            "peak_throughput": self.peak_throughput,
            "metrics": dict(self.metrics),
            "profile_range": None if self.profile_range is None else vars(self.profile_range),
            "candidates": self.candidates,
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>") -> ThroughputModel:
        """Inverse of :meth:`to_dict`; :class:`ModelFileError` naming the field on bad input."""
        if not isinstance(data, dict):
            raise ModelFileError(f"{source}: expected a JSON object")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise ModelFileError(f"{source}: format: expected {FORMAT!r}, got {fmt!r}")
        for key in ("family", "mode", "theta", "global_batch", "ratio"):
            if key not in data:
                raise ModelFileError(f"{source}: missing field '{key}'")
        theta = data["theta"]
        if not isinstance(theta, list) or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in theta
        ):
            raise ModelFileError(f"{source}: theta: expected a list of numbers")
        rng = data.get("profile_range")
        try:
            profile_range = None if rng is None else ProfileRange(**rng)
        except TypeError as exc:
            raise ModelFileError(f"{source}: profile_range: {exc}") from None
        metrics = data.get("metrics") or {}
        candidates = data.get("candidates") or {}
        if not isinstance(metrics, dict) or not isinstance(candidates, dict):
            raise ModelFileError(f"{source}: metrics and candidates must be JSON objects")
        try:
            return cls(
                family=str(data["family"]),
                mode=str(data["mode"]),
                theta=tuple(theta),
                global_batch=data["global_batch"],
                ratio=data["ratio"],
                min_workers=data.get("min_workers", 1),
                max_workers=data.get("max_workers", 1000),
                profile_range=profile_range,
                metrics=metrics,
                candidates=candidates,
            )
        except ThroughputError as exc:
            raise ModelFileError(f"{source}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ModelFileError(f"{source}: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model as JSON, atomically (readers never see a half-written file)."""
        text = json.dumps(_json_safe(self.to_dict()), indent=2, allow_nan=False, ensure_ascii=False)
        text += "\n"
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ThroughputModel:
        """Read a model file; :class:`ModelFileError` with the file name on any problem."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ModelFileError(f"{p}: no such file") from None
        except IsADirectoryError:
            raise ModelFileError(f"{p}: is a directory, expected a model JSON file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelFileError(f"{p}: cannot read ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelFileError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        return cls.from_dict(data, source=str(p))


def _json_safe(value: Any) -> Any:
    """NaN/inf → None, numpy scalars → Python, recursively (model files are strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
