"""Lublin & Feitelson's parallel workload model (JPDC 2003): seeded synthetic rigid-job logs.

``lublin_256.swf`` (the log RLScheduler calls Lublin-1) is one sample of this model for a
256-processor machine. A learned queue policy needs *other* samples of the same model: to
train on without touching the judged sequences of that log, and to be judged on sequences
nobody has seen. This is the model's "typeless" variant (batch and interactive jobs not told
apart — ``lublin_256.swf`` marks every job with the same type), with the model's published
parameters:

* **size** — serial with probability 0.244; otherwise ``2^u`` with ``u`` from a two-stage
  uniform (``[0.8, UHi − 2.5]`` with probability 0.86, else ``[UHi − 2.5, UHi]``, ``UHi =
  log2(processors)``), rounded to a power of two for 57.6 % of all jobs;
* **run time** — ``exp`` of a hyper-gamma: gamma(4.2, 0.94) with probability ``p = −0.0054 ·
  size + 0.78`` (clipped to [0, 1]: larger jobs run longer), else gamma(312, 0.03); draws
  above 12 (about two days) are redrawn;
* **arrivals** — a daily cycle: each inter-arrival is ``exp`` of a gamma(10.2303 · 1.0225,
  0.4871) draw (redrawn above 13), paid out in "points" across half-hour buckets whose
  weights follow a gamma(8.1737, 3.9631) profile over the day, so jobs bunch in working
  hours (the model's arrival process, bucket for bucket).

Run-time estimates are the run times, as in the model's own logs (no requested times).
``arrival_scale`` stretches (> 1) or compresses (< 1) the inter-arrival gaps, to match a
given log's offered load (see :func:`mean_gap_ratio`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from placement.workloads.batch import BatchJobs

BUCKETS = 48
"""Half-hour buckets of the daily cycle."""
BUCKET_S = 86400.0 / BUCKETS
DAY_START_BUCKET = 11
"""The model's day profile starts at this bucket and wraps around."""
MAX_LOG_RUN = 12.0
MAX_LOG_GAP = 13.0


@dataclass(frozen=True)
class LublinModel:
    """The model's parameters (defaults: the published typeless fit)."""

    serial_prob: float = 0.244
    pow2_prob: float = 0.576
    u_low: float = 0.8
    u_med_below_hi: float = 2.5
    """``UMed = UHi − this`` (the model's own rule for scaling to a machine size)."""
    u_prob: float = 0.86
    a1: float = 4.2
    b1: float = 0.94
    a2: float = 312.0
    b2: float = 0.03
    pa: float = -0.0054
    pb: float = 0.78
    a_arr: float = 10.2303 * 1.0225
    b_arr: float = 0.4871
    a_num: float = 8.1737
    b_num: float = 3.9631
    arrival_scale: float = 1.0
    """Multiplies every inter-arrival gap (offered load ∝ 1 / arrival_scale)."""


def _bucket_weights(model: LublinModel) -> np.ndarray:
    """Relative arrival intensity of each half-hour bucket (mean 1)."""
    weights: np.ndarray = np.zeros(BUCKETS)
    for i in range(DAY_START_BUCKET, BUCKETS + DAY_START_BUCKET):
        cdf = stats.gamma.cdf([i - 0.5, i + 0.5], model.a_num, scale=model.b_num)
        weights[(i - 1) % BUCKETS] = cdf[1] - cdf[0]
    normalised: np.ndarray = weights / float(weights.mean())
    return normalised


def _gamma_below(rng: np.random.Generator, shape: float, scale: float, limit: float) -> float:
    while True:
        value = float(rng.gamma(shape, scale))
        if value <= limit:
            return value


def _sizes(rng: np.random.Generator, count: int, processors: int, m: LublinModel) -> np.ndarray:
    u_hi = math.log2(processors)
    u_med = u_hi - m.u_med_below_hi
    kind = rng.random(count)
    low = rng.random(count) <= m.u_prob
    par = np.where(low, rng.uniform(m.u_low, u_med, count), rng.uniform(u_med, u_hi, count))
    par = np.where(kind <= m.serial_prob + m.pow2_prob, np.floor(par + 0.5), par)
    size = np.floor(2.0**par + 0.5).astype(np.int64)
    return np.where(kind <= m.serial_prob, 1, np.minimum(size, processors))


def _run_times(rng: np.random.Generator, size: np.ndarray, m: LublinModel) -> np.ndarray:
    p = np.clip(m.pa * size + m.pb, 0.0, 1.0)
    out = np.empty(len(size))
    for i, p_first in enumerate(p):
        while True:  # a draw above the limit is redrawn, the mixture's branch included
            shape, scale = (m.a1, m.b1) if rng.random() <= p_first else (m.a2, m.b2)
            value = float(rng.gamma(shape, scale))
            if value <= MAX_LOG_RUN:
                break
        out[i] = math.floor(math.exp(value))
    return np.maximum(out, 1.0)


def _arrivals(rng: np.random.Generator, count: int, m: LublinModel) -> np.ndarray:
    """Submit times: gamma-distributed gaps paid out through the daily bucket weights."""
    weights = _bucket_weights(m)
    bucket, points, remainder, clock = 0, 0.0, 0.0, 0.0
    out = np.empty(count)
    for i in range(count + 1):
        gap_points = math.exp(_gamma_below(rng, m.a_arr, m.b_arr, MAX_LOG_GAP)) / BUCKET_S
        points += gap_points
        gap = 0.0
        while points > weights[bucket]:
            points -= weights[bucket]
            bucket = (bucket + 1) % BUCKETS
            gap += BUCKET_S
        new_remainder = points / weights[bucket]
        gap += BUCKET_S * (new_remainder - remainder)
        remainder = new_remainder
        clock = math.floor(clock + gap * m.arrival_scale)
        if i < count:  # the model's first job arrives after one gap, like its C code
            out[i] = clock
    return out


def generate_lublin(
    count: int, *, processors: int = 256, seed: int = 0, model: LublinModel | None = None
) -> BatchJobs:
    """``count`` jobs of the model for a machine of ``processors`` (a power of two or not:
    sizes never exceed it), in submit order, job ids 1…count. Same seed, same jobs."""
    if count < 1 or processors < 2:
        raise ValueError("need at least one job and a machine of two processors or more")
    m = model or LublinModel()
    rng = np.random.default_rng(seed)
    submit = _arrivals(rng, count, m)
    size = _sizes(rng, count, processors, m)
    run = _run_times(rng, size, m)
    return BatchJobs(
        job_id=np.arange(1, count + 1, dtype=np.int64),
        submit_s=submit,
        run_s=run,
        estimate_s=run.copy(),
        size=size,
    )


def arrival_scale_for(mean_gap_s: float, *, processors: int = 256, sample: int = 20000) -> float:
    """The ``arrival_scale`` that gives the model a mean inter-arrival gap of ``mean_gap_s``
    (to match the offered load of a reference log's training part)."""
    model_jobs = generate_lublin(sample, processors=processors, seed=0)
    return mean_gap_s / float(np.mean(np.diff(model_jobs.submit_s)))
