"""A physical simulation of a parameter-server CTR job, for profiles without a cluster.

Tests, examples and docs need profiles whose ground truth is known. This module computes
the per-step time of one worker from the source document (docs/design.md),

    T = td + tf + tb + tu + to + tc
    td = m·s / (B·p)          pull sparse rows          tf = m·t_forward
    tu = (m·s + d) / (B·p)    push gradients            tb = t_backward
    to = m·s·t_update / p     optimizer on the PS       tc = λ·p + λ'·w

with B = min(B0/w, B0/p) and m = M/w in synchronous training (throughput M / T), and
B = B0/p with a fixed per-worker batch in asynchronous training (throughput w·m / T). It is
the physics, not the fitted family: the min() is exact, the optimizer term is M/(w·p), and
p follows ceil(w/ratio), so a family that fits it has earned it.

The default job is CTR-like: 26 sparse fields × 32-dim fp32 embeddings per sample, a ~600k
parameter dense MLP, 25 Gbit/s links; with 4 workers per PS the synchronous peak lands at
about 45 workers. Each seed jitters the physical constants a little (so tests cover a family
of jobs, not one) while keeping the synchronous peak within 30–60 workers, then draws
multiplicative log-normal measurement noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from throughput.profile import Profile

DEFAULT_WORKERS = (*range(1, 7), *range(8, 17, 2), *range(20, 81, 4))
"""Worker counts a profiling run measures: dense where the curve bends, sparser later."""


@dataclass(frozen=True)
class SimParams:
    """Physical constants of the simulated job (SI units: bytes, seconds)."""

    global_batch: int = 4096
    """M: samples per synchronous step, split evenly over the workers (m = M/w)."""
    async_batch: int = 512
    """m: per-worker batch in asynchronous training (each worker steps on its own)."""
    bandwidth_bytes_s: float = 25e9 / 8
    """B0: link bandwidth of a worker or a PS (25 Gbit/s)."""
    dense_bytes: float = 2.4e6
    """d: dense MLP parameters pushed per step (~600k fp32)."""
    sparse_bytes_per_sample: float = 26 * 32 * 4
    """s: embedding rows one sample touches (26 fields × 32 dims × 4 bytes)."""
    t_forward_s: float = 40e-6
    """Forward time per sample on one GPU."""
    t_backward_s: float = 4e-3
    """Backward time per mini-batch (the source document takes it as constant)."""
    t_update_s_per_byte: float = 0.5e-9
    """PS optimizer time per byte of sparse rows (≈ 2 GB/s per PS)."""
    lambda_ps_s: float = 150e-6
    """λ: per-PS overhead per step (connection fan-out, barrier bookkeeping)."""
    lambda_worker_s: float = 60e-6
    """λ': per-worker overhead per step (straggler wait, barrier)."""

    def step_time(self, workers: np.ndarray, ps: np.ndarray, mode: str) -> np.ndarray:
        """Per-step time T of one worker (seconds), vectorised over (w, p)."""
        w = np.asarray(workers, dtype=np.float64)
        p = np.asarray(ps, dtype=np.float64)
        b0 = self.bandwidth_bytes_s
        if mode == "sync":
            m = self.global_batch / w
            bw = np.minimum(b0 / w, b0 / p)
        elif mode == "async":
            m = np.full_like(w, float(self.async_batch))
            bw = b0 / p
        else:
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        s = self.sparse_bytes_per_sample
        td = m * s / (bw * p)
        tu = (m * s + self.dense_bytes) / (bw * p)
        tf = m * self.t_forward_s
        tb = self.t_backward_s
        to = m * s * self.t_update_s_per_byte / p
        tc = self.lambda_ps_s * p + self.lambda_worker_s * w
        return td + tf + tb + tu + to + tc

    def throughput(self, workers: np.ndarray, ps: np.ndarray, mode: str) -> np.ndarray:
        """True samples/s: M/T (sync) or w·m/T (async)."""
        w = np.asarray(workers, dtype=np.float64)
        t = self.step_time(w, ps, mode)
        rate: np.ndarray = self.global_batch / t if mode == "sync" else w * self.async_batch / t
        return rate


def params_for_seed(seed: int, *, jitter: float = 0.15, base: SimParams | None = None) -> SimParams:
    """The job of ``seed``: ``base`` with each constant scaled by exp(N(0, jitter)).

    Redrawn until the synchronous peak (ratio 4) lies in 30–60 workers, so every seed is a
    realistic job. Seed-stable: the same seed always gives the same job.
    """
    base = base or SimParams()
    if jitter <= 0:
        return base
    rng = np.random.default_rng([int(seed), 0x6B616C65])
    jittered = (
        "dense_bytes",
        "sparse_bytes_per_sample",
        "t_forward_s",
        "t_backward_s",
        "t_update_s_per_byte",
        "lambda_ps_s",
        "lambda_worker_s",
    )
    for _ in range(1000):
        factors = np.exp(rng.normal(0.0, jitter, size=len(jittered)))
        params = replace(
            base, **{n: getattr(base, n) * float(f) for n, f in zip(jittered, factors, strict=True)}
        )
        peak = TrueCurve(params, "sync", 4).peak(1, 200)[0]
        if 30 <= peak <= 60:
            return params
    return base  # pragma: no cover - the jitter is small; 1000 misses cannot happen


@dataclass(frozen=True)
class TrueCurve:
    """Ground truth for tests: the simulated job's noise-free f with p tied by the ratio."""

    params: SimParams
    """The job's physical constants."""
    mode: str
    """``sync`` or ``async``."""
    ratio: int = 4
    """Workers per PS."""

    def throughput(
        self, workers: int | np.ndarray, ps: int | np.ndarray | None = None
    ) -> np.ndarray:
        """True samples/s (p defaults to ceil(w/ratio))."""
        w = np.atleast_1d(np.asarray(workers, dtype=np.int64))
        p = -(-w // self.ratio) if ps is None else np.atleast_1d(np.asarray(ps, dtype=np.int64))
        return self.params.throughput(w, p, self.mode)

    def peak(self, lo: int, hi: int) -> tuple[int, float]:
        """(argmax w, max f) over [lo, hi] with p tied by the ratio."""
        w = np.arange(lo, hi + 1)
        f = self.throughput(w)
        i = int(np.argmax(f))
        return int(w[i]), float(f[i])

    def min_workers(self, load: float, lo: int, hi: int) -> int | None:
        """Smallest w in [lo, hi] with true f(w) > load, or None past the peak."""
        w = np.arange(lo, hi + 1)
        above = np.flatnonzero(self.throughput(w) > load)
        return int(w[above[0]]) if above.size else None


def configurations(
    ratio: int, workers: tuple[int, ...] = DEFAULT_WORKERS
) -> list[tuple[int, int, bool]]:
    """(w, p, on_ratio) to measure: every w at p = ceil(w/ratio), plus off-ratio p for some w.

    Off-ratio points (p = ceil(w/2), ceil(w/8)) make the general family's p-terms identifiable;
    production profiling sweeps p the same way.
    """
    out: list[tuple[int, int, bool]] = []
    for i, w in enumerate(workers):
        tied = math.ceil(w / ratio)
        out.append((w, tied, True))
        if w >= 4 and i % 2 == 0:
            for other in sorted({math.ceil(w / (ratio / 2)), math.ceil(w / (ratio * 2))}):
                if other != tied and 1 <= other <= w:
                    out.append((w, other, False))
    return out


def generate_profile(
    mode: str,
    *,
    seed: int = 1,
    noise: float = 0.03,
    repeats: int = 2,
    ratio: int = 4,
    global_batch: int | None = None,
    params: SimParams | None = None,
) -> tuple[Profile, TrueCurve]:
    """Simulate a profiling run: each configuration measured ``repeats`` times (off-ratio once).

    ``noise`` is the σ of multiplicative log-normal noise (0.03 ≈ 3 %). Returns the profile and
    the ground truth it was drawn from.
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    if noise < 0 or repeats < 1 or ratio < 1:
        raise ValueError("noise must be ≥ 0, repeats and ratio ≥ 1")
    job = params if params is not None else params_for_seed(seed)
    if global_batch is not None:
        job = replace(job, global_batch=int(global_batch))
    rng = np.random.default_rng([int(seed), 0x6E6F6973])
    rows_w: list[int] = []
    rows_p: list[int] = []
    for w, p, on_ratio in configurations(ratio):
        for _ in range(repeats if on_ratio else 1):
            rows_w.append(w)
            rows_p.append(p)
    w_arr = np.asarray(rows_w, dtype=np.int64)
    p_arr = np.asarray(rows_p, dtype=np.int64)
    true = job.throughput(w_arr, p_arr, mode)
    measured = np.round(true * np.exp(rng.normal(0.0, noise, size=true.shape)), 2)
    profile = Profile.from_arrays(
        w_arr, p_arr, measured, modes=[mode] * len(w_arr), source=f"<generated {mode} seed={seed}>"
    )
    return profile, TrueCurve(job, mode, ratio)


def describe(params: SimParams) -> dict[str, float]:
    """The constants as a flat dict (for docs and benchmark output)."""
    return {f.name: float(getattr(params, f.name)) for f in fields(params)}
