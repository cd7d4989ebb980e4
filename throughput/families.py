"""The throughput families: physical step-time models with non-negative coefficients θ.

Every family has the same shape, ``f = N(w, M) / (X(w, p, M) · θ)`` with θ ≥ 0, because the
step time of a parameter-server job is a sum of non-negative costs (pull, push, compute,
optimizer, overhead) and throughput is work per step divided by step time. That shape is why
fitting is easy: ``N / f = X · θ`` is *linear* in θ, so non-negative least squares gives a
global starting point before a refinement on relative error (see :mod:`throughput.fit`).

* sync (global batch M fixed, all workers hit the PS together, bandwidth min(B0/w, B0/p)):
  ``general``      f(w,p) = M / (θ0 + θ1·M/w + θ2·M/p + θ3·w/p + θ4·w + θ5·p)
  ``fixed-ratio``  f(w)   = M / (θ0 + θ1/w + θ2·w)            (p = ceil(w / ratio))
* async (workers reach the PS staggered, bandwidth B0/p, total = w × one worker's rate):
  ``general``      f(w,p) = w / (θ0 + θ1/p + θ2·p + θ3·w)
  ``fixed-ratio``  f(w)   = w / (θ0 + θ1/w + θ2·w)
* comparison only, never picked by ``auto``:
  ``linear``       f = w / θ0, i.e. a·w through the origin with a = 1/θ0 (MADU's GPU fit)
  ``optimus``      Optimus (EuroSys'18) speed function, in samples/s:
                   sync  f = M / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)
                   async f = w / (θ0 + θ1·w/p + θ2·w + θ3·p)

The Optimus form is quoted from the paper's resource-speed model (steps/s there; multiplied by
the batch here so every family is in samples/s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from throughput.errors import FitError

Design = Callable[[np.ndarray, np.ndarray, float], np.ndarray]

SEED_FAMILIES = ("general", "fixed-ratio")
"""The source document's families (docs/design.md), the ones ``auto`` chooses among."""
COMPARISON_FAMILIES = ("linear", "optimus")
FAMILY_NAMES = (*SEED_FAMILIES, *COMPARISON_FAMILIES)


@dataclass(frozen=True)
class Family:
    """One model family of one training mode."""

    name: str
    """``general``, ``fixed-ratio``, ``linear`` or ``optimus``."""
    mode: str
    """``sync`` or ``async``: the families differ because the bandwidth model does."""
    terms: tuple[str, ...]
    """Printable denominator terms, one per θ (``"1"`` is the constant)."""
    numerator: str
    """``"M"`` (sync: the global batch per step) or ``"w"`` (async and linear)."""
    uses_ps: bool
    """False when the family assumes p = ceil(w/ratio) and ignores the given p."""
    selectable: bool
    """Whether ``family="auto"`` may pick it (the comparison families may not)."""
    design_fn: Design
    """(w, p, M) → the denominator design matrix, one column per θ."""

    @property
    def n_params(self) -> int:
        """Number of coefficients θ."""
        return len(self.terms)

    def design(self, workers: np.ndarray, ps: np.ndarray, global_batch: float) -> np.ndarray:
        """Denominator design matrix X, shape (n, n_params), all entries > 0 for w, p ≥ 1."""
        w = np.asarray(workers, dtype=np.float64)
        p = np.asarray(ps, dtype=np.float64)
        return self.design_fn(w, p, float(global_batch))

    def numer(self, workers: np.ndarray, global_batch: float) -> np.ndarray:
        """Numerator N: the global batch (sync) or the worker count (async, linear)."""
        w = np.asarray(workers, dtype=np.float64)
        if self.numerator == "M":
            return np.full_like(w, float(global_batch))
        return w

    def predict(
        self, theta: np.ndarray, workers: np.ndarray, ps: np.ndarray, global_batch: float
    ) -> np.ndarray:
        """Throughput (samples/s) at each (w, p); vectorised, no validation (hot path)."""
        x = self.design(workers, ps, global_batch)
        out: np.ndarray = self.numer(workers, global_batch) / (
            x @ np.asarray(theta, dtype=np.float64)
        )
        return out

    def formula(self) -> str:
        """Human-readable formula with θ placeholders, e.g. ``M / (θ0 + θ1·M/w + …)``."""
        parts = [
            f"θ{i}" if t == "1" else f"θ{i}{t[1:]}" if t.startswith("1/") else f"θ{i}·{t}"
            for i, t in enumerate(self.terms)
        ]
        if len(parts) == 1:
            return f"{self.numerator} / {parts[0]}"
        return f"{self.numerator} / ({' + '.join(parts)})"


def _col(*cols: np.ndarray) -> np.ndarray:
    return np.column_stack(cols)


def _sync_general(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w), m / w, m / p, w / p, w, p)


def _sync_fixed(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w), 1.0 / w, w)


def _async_general(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w), 1.0 / p, p, w)


def _async_fixed(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w), 1.0 / w, w)


def _linear(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w))


def _optimus_sync(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(m / w, np.ones_like(w), w / p, w, p)


def _optimus_async(w: np.ndarray, p: np.ndarray, m: float) -> np.ndarray:
    return _col(np.ones_like(w), w / p, w, p)


_ALL: dict[tuple[str, str], Family] = {
    ("sync", "general"): Family(
        "general", "sync", ("1", "M/w", "M/p", "w/p", "w", "p"), "M", True, True, _sync_general
    ),
    ("sync", "fixed-ratio"): Family(
        "fixed-ratio", "sync", ("1", "1/w", "w"), "M", False, True, _sync_fixed
    ),
    ("async", "general"): Family(
        "general", "async", ("1", "1/p", "p", "w"), "w", True, True, _async_general
    ),
    ("async", "fixed-ratio"): Family(
        "fixed-ratio", "async", ("1", "1/w", "w"), "w", False, True, _async_fixed
    ),
    ("sync", "linear"): Family("linear", "sync", ("1",), "w", False, False, _linear),
    ("async", "linear"): Family("linear", "async", ("1",), "w", False, False, _linear),
    ("sync", "optimus"): Family(
        "optimus", "sync", ("M/w", "1", "w/p", "w", "p"), "M", True, False, _optimus_sync
    ),
    ("async", "optimus"): Family(
        "optimus", "async", ("1", "w/p", "w", "p"), "w", True, False, _optimus_async
    ),
}


def get_family(mode: str, name: str) -> Family:
    """The family ``name`` of ``mode``; :class:`FitError` naming the choices otherwise."""
    if mode not in ("sync", "async"):
        raise FitError(f"mode must be 'sync' or 'async', got {mode!r}")
    try:
        return _ALL[(mode, name)]
    except KeyError:
        raise FitError(
            f"unknown family {name!r} (choose from auto, {', '.join(FAMILY_NAMES)})"
        ) from None


def families_for(mode: str, *, selectable_only: bool = False) -> list[Family]:
    """Every family of ``mode`` in display order (seed families first)."""
    out = [get_family(mode, name) for name in FAMILY_NAMES]
    return [f for f in out if f.selectable] if selectable_only else out
