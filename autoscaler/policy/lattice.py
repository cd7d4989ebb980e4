"""The backlog lattice of the planner's dynamic program (:mod:`autoscaler.policy.mpc`).

The backlog is continuous; a dynamic program needs it on points. Per size the points are
``X[k, size] + q·h`` (X the size's accumulated net inflow under the forecast, h the spacing),
so staying at a size takes a point to a point *exactly*, however many steps — staying is most
of what a plan does, and rounding it step after step would accumulate. Only a queue refilling
from empty and a resize landing fall between points; they are rounded up, which keeps every
plan the lattice finds feasible feasible (the FIFO queue is monotone in its backlog).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_EPS = 1e-9


def band_sizes(
    sizes: np.ndarray, cur: int, needs: np.ndarray, lowest: int, band: int, max_sizes: int
) -> np.ndarray:
    """The sizes a plan may use: from ``lowest`` to the largest of ``needs`` (each step's
    need), widened by ``band`` sizes; past ``max_sizes``, every step's need and the current
    size are kept and the rest thinned evenly. The current size is always in (the start)."""
    lo_i = max(0, int(np.searchsorted(sizes, lowest)) - band)
    hi_i = min(len(sizes), int(np.searchsorted(sizes, int(needs.max()))) + band + 1)
    out = sizes[lo_i:hi_i]
    if len(out) > max_sizes:
        must = np.isin(out, needs) | (out == cur)
        must[[0, -1]] = True
        rest = np.flatnonzero(~must)
        keep = max(0, max_sizes - int(must.sum()))
        if keep and len(rest):
            must[rest[np.unique(np.linspace(0, len(rest) - 1, keep).round().astype(int))]] = True
        out = out[must]
    if cur not in out:
        out = np.sort(np.append(out, cur))
    return out


class BacklogLattice:
    """Backlog lattice of every size at every step boundary, and the stay moves on it."""

    def __init__(self, net: np.ndarray, h: float, q: int) -> None:
        # net[k, i]: samples added (arrivals − service) during step k at size i.
        n, w = net.shape
        x = np.zeros((n + 1, w))
        np.cumsum(net, axis=0, out=x[1:])
        f = np.floor(x / h)
        self.h, self.q = h, q
        self.rem = x - f * h  # lattice offset in [0, h) at each boundary
        self.shift = (f[1:] - f[:-1]).astype(np.int64)  # stay: q → q + shift
        cols = np.arange(q + 1)
        self.values = np.where(
            cols[None, None, :] == 0, 0.0, self.rem[:, :, None] + (cols - 1)[None, None, :] * h
        )
        """Backlog of (boundary k, size i, column c); column 0 is the empty queue."""
        moved = (cols - 1)[None, None, :] + self.shift[:, :, None]
        up = np.clip(np.ceil((net - self.rem[1:]) / h), 0, q - 1).astype(np.int64) + 1
        stay = np.where(moved < 0, 0, np.minimum(moved, q - 1) + 1)
        stay[:, :, 0] = np.where(net > 0, up, 0)  # an empty queue refills: round up
        self.stay = stay
        """Column reached at boundary k+1 by staying at size i from column c at k."""
        reached = self.rem[1:, :, None] + np.maximum(moved, 0) * h
        reached[:, :, 0] = np.maximum(net, 0.0)
        self.reached = np.maximum(reached, np.take_along_axis(self.values[1:], stay, axis=2))
        """Backlog reached by staying, before clipping at the lattice's top: past the top
        a violation's price still grows with the backlog (the least behind plan wins)."""

    def column(self, k: Any, i: Any, b: Any) -> np.ndarray:
        """The lattice column at boundary k of size i at or above backlog b (rounded up);
        k, i and b broadcast together."""
        b = np.asarray(b, dtype=float)
        q = np.clip(np.ceil((b - self.rem[k, i]) / self.h - _EPS), 0, self.q - 1) + 1
        out: np.ndarray = np.where(b <= 0, 0, q).astype(np.int64)
        return out
