"""The dynamic program's settings and one decision's arrays, for :mod:`autoscaler.policy.mpc`.

Kept apart from the passes so each module reads on its own: this one says what a decision's
problem is (sizes, capacities, the backlog lattice, what a resize costs and is worth, how the
horizon's end is valued); :mod:`autoscaler.policy.mpc` solves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autoscaler.policy.lattice import BacklogLattice

_EPS = 1e-9


@dataclass(frozen=True)
class DpSettings:
    """The dynamic program's tunables."""

    margin_s: float = 0.0
    """Keep the planned oldest-sample age this far under the SLO."""
    resize_cost_factor: float = 0.0
    """Each resize is charged this × downtime × the larger size, in GPU-seconds."""
    tail_steps: int = 15
    """The end size is charged this many steps past the horizon."""
    buckets: int = 40
    """Backlog lattice points per size (the zero backlog aside)."""
    max_sizes: int = 16
    """Sizes the program considers (a band around the horizon's needs, thinned below)."""
    band: int = 2
    """The band reaches this many sizes past the needs of the forecast."""
    violation_cost: float = math.inf
    """GPU-seconds a violating step costs (inf: fewest violations first, then cost)."""
    up_before_rise: bool = False
    """A scale-up the plan makes later is made now if it would land after the median first
    exceeds the current capacity by ``rise_tolerance`` (forecasts err in timing too)."""
    rise_tolerance: float = 0.1


def _terminal(
    s: DpSettings,
    values: np.ndarray,
    S: np.ndarray,
    C: np.ndarray,
    *,
    load: float,
    room: float,
    top: int,
    gpw: float,
    dt: float,
    P: float,
    slack: float = _EPS,
) -> np.ndarray:
    """Value of ending the horizon at each size (rows) and lattice backlog (columns): the end
    size must sustain the load of the horizon's last step (or be the peak) and the backlog
    leave room for one more resize; it is then held ``tail_steps``. ``slack``: how far a
    lattice backlog may lie above the room (it is rounded up by less than one lattice step;
    the room is a margin for a later resize, and the chosen plan's exact end is checked)."""
    sustains = ((load <= C) | (top <= S))[:, None]
    hold = s.tail_steps * gpw * dt * S[:, None] + np.zeros_like(values)
    out: np.ndarray = np.where(sustains & (values <= room + slack), hold, hold + P)
    return out


@dataclass
class _Problem:
    """One decision's arrays (built by :func:`solve`, read by the passes)."""

    n: int
    m: int
    d: float
    S: np.ndarray
    C: np.ndarray
    net: np.ndarray
    lat: BacklogLattice
    allowed: np.ndarray
    cum: np.ndarray
    upper: np.ndarray
    gpw: float
    dt: float
    kappa: float
    P: float
    R: int
    limited: bool
    left: np.ndarray
    grid: np.ndarray
    layers: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    """:func:`_all_layers` (set once the problem is built)."""

    def units(self, b: np.ndarray, allowed: np.ndarray | float) -> np.ndarray:
        """Violation units of ending a step with backlog b: 0 within the SLO, else 1 plus the
        excess in units of the horizon's largest allowed backlog (so that, when no plan keeps
        the SLO, the one that falls least behind wins, not merely the fewest steps)."""
        excess = b - allowed
        scale = max(float(self.allowed.max()), self.lat.h)
        out: np.ndarray = np.where(excess > _EPS, 1.0 + excess / scale, 0.0)
        return out

    def landing(
        self, k: int, b: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A resize started at step k with backlogs b (1-D): per target size (rows) and b
        (columns), the backlog when it is up at k + m, its violation units and violating
        steps, and the GPU-seconds served at the new size in its last step (a fractional
        downtime)."""
        m, d, dt = self.m, self.d, self.dt
        full = m if m == d else m - 1  # steps served by nobody
        grown = b[:, None] + (self.cum[k + 1 : k + full + 1] - self.cum[k])[None, :]
        units = self.units(grown, self.allowed[k : k + full][None, :])
        u_sum = units.sum(1)[None, :]
        count = (units > 0).sum(1)[None, :]
        W = len(self.S)
        zero = np.zeros((W, len(b)))
        if full == m:
            land = zero + (b + (self.cum[k + m] - self.cum[k]))[None, :]
            return land, zero + u_sum, zero + count, zero
        u = self.upper[k + m - 1]
        up_s = (m - d) * dt
        before = b + (self.cum[k + m - 1] - self.cum[k]) + u * (dt - up_s)
        land = np.maximum(0.0, before[None, :] + (u - self.C[:, None]) * up_s)
        lu = self.units(land, self.allowed[k + m - 1])
        extra = zero + (self.gpw * up_s * self.S)[:, None]
        return land, u_sum + lu, count + (lu > 0), extra


def _resize_tables(p: _Problem) -> tuple[np.ndarray, np.ndarray]:
    """For a resize started at each step k (axis 0) to each size (axis 1) from each grid
    backlog (axis 2): the lattice column it lands on at k + m, and what it costs besides
    the sizes held during the downtime (violations, the served part of its last step)."""
    n, m, W = p.n, p.m, len(p.S)
    ks = np.arange(max(0, n - m + 1))  # resizes that end within the horizon
    if not len(ks):
        return np.zeros((0, W, len(p.grid)), dtype=np.int64), np.zeros((0, W, len(p.grid)))
    b = p.grid[None, :]
    full = m if m == p.d else m - 1
    units = np.zeros((len(ks), len(p.grid)))
    for t in range(full):  # steps served by nobody
        grown = b + (p.cum[ks + t + 1] - p.cum[ks])[:, None]
        units += p.units(grown, p.allowed[ks + t][:, None])
    if full == m:
        land = (b + (p.cum[ks + m] - p.cum[ks])[:, None])[:, None, :]
        extra = np.zeros((len(ks), W, 1))
    else:
        u = p.upper[ks + m - 1][:, None, None]
        up_s = (m - p.d) * p.dt
        before = b[:, None, :] + (p.cum[ks + m - 1] - p.cum[ks])[:, None, None] + u * (p.dt - up_s)
        land = np.maximum(0.0, before + (u - p.C[None, :, None]) * up_s)
        extra = p.gpw * up_s * p.S[None, :, None] + p.P * p.units(
            land, p.allowed[ks + m - 1][:, None, None]
        )
    cols = p.lat.column((ks + m)[:, None, None], np.arange(W)[None, :, None], land)
    cost = extra + p.P * units[:, None, :]
    return cols, cost + np.zeros(cols.shape)


def _resize_values(
    p: _Problem,
    V: np.ndarray,
    ks: np.ndarray,
    layers: np.ndarray,
    cols: np.ndarray,
    cost: np.ndarray,
) -> np.ndarray:
    """Value of starting a resize at each step of ``ks`` (axis 0), at each budget layer
    (axis 1; ``layers``: where it lands, −1: not allowed), from each size (axis 2) with each
    grid backlog (axis 3), given the values ``V`` where it lands (at k + m, known) and the
    steps' :func:`_resize_tables`. The best target is a suffix minimum over the larger sizes
    (whose size is then held during the downtime) and a prefix minimum over the smaller."""
    W = len(p.S)
    wi = np.arange(W)[None, None, :, None]
    H = V[
        (ks + p.m)[:, None, None, None],
        np.maximum(layers, 0)[:, :, None, None],
        wi,
        cols[:, None, :, :],
    ]
    H += cost[:, None]
    H[layers < 0] = np.inf
    ksz = (p.kappa * p.S)[None, None, :, None]
    upward = np.minimum.accumulate((ksz + H)[:, :, ::-1], axis=2)
    downward = np.minimum.accumulate(H, axis=2)
    out: np.ndarray = np.empty_like(H)
    out[:, :, :-1] = upward[:, :, -2::-1]  # min over j > i
    out[:, :, -1] = np.inf
    out[:, :, 1:] = np.minimum(out[:, :, 1:], ksz[:, :, 1:] + downward[:, :, :-1])
    return out
