"""What a perfect model of the trace generator scores on the forecasting targets.

Run from the repository root::

    .venv/bin/python -m experiments.forecast_oracle --seeds 11-40          # 90 fresh traces
    .venv/bin/python -m experiments.forecast_oracle --seeds 11-16 \\
        --compare seeds.json          # next to kale (benchmarks.forecast --seeds 11-16 --json-out)

The forecasting issue's targets are per trace and per test week: MASE ≤ 0.8× seasonal naive
and p90 coverage within 0.85–0.95 on 7 folds of 60 steps. How much of a miss is the model's
fault and how much is the week's? This benchmark answers it for generated traces, where the
truth is known: the **oracle** forecasts with the generator's own conditional distribution.

The oracle knows more than any model that sees only the series: the daily and weekend
shapes, trend, 17-day wave and peak/trough offset exactly; every past day level, burst and
the correlated noise's current state. It infers the day level being approached from the
steps since the last day midpoint (a grid posterior; the level is linear between midpoints)
and simulates the rest: later day levels, new bursts (a Poisson process), the noise.
Its median is the conditional median per step (the MAE-optimal point forecast) and its p90
the conditional 90th percentile, so over many weeks no model can beat its MASE or be better
calibrated. Whatever targets it misses on a trace, that trace's test week makes unattainable.

A second oracle, ``oracle_blind``, does not see the correlated noise: it infers the approached
level and the noise's state from the series with a Kalman filter per candidate level. It is
the tighter bound for a model that sees only the series.

Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np

from autoscaler.sim.tracegen import (
    BURST_AMP,
    BURST_TAU_MIN,
    Burst,
    TraceComponents,
    burst_factor,
    trace_components,
)
from benchmarks.forecast import (
    COVERAGE,
    FOLDS,
    GENERATED,
    HORIZON,
    MASE_RATIO,
    SEED_SHAPES,
    TEST_DAYS,
    seed_traces_from_args,
)
from forecasting import metrics
from forecasting.backtest import backtest, origin_positions
from forecasting.registry import make_forecaster

GRID = np.linspace(-5.0, 5.0, 401)  # the approached day level's log, in prior sds


def _approach(c: TraceComponents, origin: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(index j of the last day midpoint before ``origin``, log-level grid, log prior on it)."""
    j = int(np.nonzero(c.day_midpoints <= c.t_days[origin - 1])[0][-1])
    grid = GRID * c.day_level_sd
    return j, grid, -0.5 * (grid / c.day_level_sd) ** 2


def _candidate_log_levels(
    c: TraceComponents, j: int, grid: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """(len(grid), len(t)): log level at times t past midpoint j, per candidate next level."""
    frac = t - c.day_midpoints[j]
    return np.log(c.day_level[j] * (1 - frac)[None, :] + np.exp(grid)[:, None] * frac[None, :])


def approached_level_posterior(
    c: TraceComponents, raw: np.ndarray, origin: int
) -> tuple[int, np.ndarray, np.ndarray]:
    """(index j+1 of the day level being approached, log-level grid, its posterior weights).

    Between midpoints j and j+1 the level is linear, so the steps since midpoint j (their
    log value minus shape, bursts and correlated noise: log level + white noise) tell where
    it is heading. Prior: the generator's log-normal day level.
    """
    j, grid, log_prior = _approach(c, origin)
    seg = np.nonzero((c.t_days >= c.day_midpoints[j]) & (np.arange(len(c.t_days)) < origin))[0]
    if len(seg) == 0 or c.sd_white <= 0:
        w = np.exp(log_prior - log_prior.max())
        return j + 1, grid, w / w.sum()
    u = np.log(raw[seg] / (c.base[seg] * burst_factor(c.t_days[seg], c.bursts))) - c.ar[seg]
    lev = _candidate_log_levels(c, j, grid, c.t_days[seg])
    loglik = -0.5 * np.sum((u[None, :] - lev) ** 2, axis=1) / c.sd_white**2 + log_prior
    w = np.exp(loglik - loglik.max())
    return j + 1, grid, w / w.sum()


def blind_level_posterior(
    c: TraceComponents, raw: np.ndarray, origin: int
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, float]:
    """Like :func:`approached_level_posterior`, without seeing the correlated noise.

    The observed log value minus shape and bursts is ``log level + ar + white``; for each
    candidate level on the grid a Kalman filter runs the AR(1) state through the steps since
    the previous day midpoint (the level there is known: past day levels) and scores the
    candidate by its prediction-error likelihood. Returns (index of the approached level,
    grid, posterior weights, filtered AR mean at the origin per candidate, its variance).
    """
    j, grid, log_prior = _approach(c, origin)
    start = c.day_midpoints[j - 1] if j >= 1 else -np.inf
    seg = np.nonzero((c.t_days >= start) & (np.arange(len(c.t_days)) < origin))[0]
    t = c.t_days[seg]
    u = np.log(raw[seg] / (c.base[seg] * burst_factor(t, c.bursts)))
    lev = np.empty((len(grid), len(seg)))
    before = t < c.day_midpoints[j]
    if before.any():  # between the two past midpoints: both levels known
        f = t[before] - c.day_midpoints[j - 1]
        lev[:, before] = np.log(c.day_level[j - 1] * (1 - f) + c.day_level[j] * f)[None, :]
    lev[:, ~before] = _candidate_log_levels(c, j, grid, t[~before])
    r = u[None, :] - lev
    q, big_r = c.sd_innovation**2, max(c.sd_white**2, 1e-12)
    var = max(q / max(1 - c.phi**2, 1e-12), 1e-12)  # stationary AR variance
    mean = np.zeros(len(grid))
    loglik = log_prior.copy()
    for i in range(len(seg)):
        if i:
            mean, var = c.phi * mean, c.phi**2 * var + q
        s = var + big_r
        v = r[:, i] - mean
        loglik -= 0.5 * v * v / s
        gain = var / s
        mean, var = mean + gain * v, (1 - gain) * var
    w = np.exp(loglik - loglik.max())
    return j + 1, grid, w / w.sum(), mean, var


def oracle_quantiles(
    c: TraceComponents,
    raw: np.ndarray,
    origin: int,
    horizon: int,
    rng: np.random.Generator,
    sims: int = 400,
    levels: tuple[float, ...] = (0.1, 0.5, 0.9),
    blind: bool = False,
) -> np.ndarray:
    """(len(levels), horizon) quantiles of the next ``horizon`` steps given all up to ``origin``.

    ``raw`` is ``c.raw()`` (passed in: computing it is the slow part). ``blind``: the noise's
    state is not known but inferred (:func:`blind_level_posterior`).
    """
    t = c.t_days
    t_prev, fut = t[origin - 1], t[origin : origin + horizon]
    h = len(fut)
    # Day levels: the past known, the approached one from its posterior, later ones fresh.
    if blind:
        nxt, grid, w, ar_mean, ar_var = blind_level_posterior(c, raw, origin)
    else:
        nxt, grid, w = approached_level_posterior(c, raw, origin)
    dl = np.repeat(c.day_level[None, :], sims, axis=0)
    unknown = np.arange(len(c.day_level)) > nxt
    dl[:, unknown] = np.exp(rng.normal(0.0, c.day_level_sd, (sims, int(unknown.sum()))))
    step = grid[1] - grid[0]
    pick = rng.choice(len(grid), size=sims, p=w)
    dl[:, nxt] = np.exp(grid[pick] + rng.uniform(-step / 2, step / 2, sims))
    k = np.floor(fut + 0.5).astype(int)  # midpoint k - 0.5 <= t < k + 0.5
    frac = fut - c.day_midpoints[k]
    level = dl[:, k] * (1 - frac) + dl[:, k + 1] * frac
    # Bursts: the started ones decay as known; new ones arrive as a Poisson process.
    burst = np.repeat(
        burst_factor(fut, [b for b in c.bursts if b.at_days <= t_prev])[None, :], sims, axis=0
    )
    span = fut[-1] - t_prev
    for s, count in enumerate(rng.poisson(c.bursts_per_day * span, sims)):
        new = [
            Burst(
                at_days=rng.uniform(t_prev, fut[-1]),
                amp=rng.uniform(*BURST_AMP),
                tau_days=rng.uniform(*BURST_TAU_MIN) / 1440.0,
            )
            for _ in range(count)
        ]
        if new:
            burst[s] += burst_factor(fut, new) - 1.0
    # Correlated noise continues from its current state; white noise is fresh.
    ar = np.empty((sims, h))
    if blind:
        acc = ar_mean[pick] + np.sqrt(ar_var) * rng.normal(0.0, 1.0, sims)
    else:
        acc = np.full(sims, c.ar[origin - 1])
    eps = rng.normal(0.0, c.sd_innovation, (sims, h))
    for i in range(h):
        acc = c.phi * acc + eps[:, i]
        ar[:, i] = acc
    white = rng.normal(0.0, c.sd_white, (sims, h))
    values = np.clip(
        c.base[origin : origin + h] * level * burst * np.exp(ar + white) - c.offset, 0.0, None
    )
    return np.quantile(values, levels, axis=0)


def score(
    c: TraceComponents, folds: int, rng: np.random.Generator, sims: int, blind: bool = False
) -> dict:
    y = c.series().to_numpy()
    raw = c.raw()
    interval = float((c.index[1] - c.index[0]).total_seconds())
    pos = origin_positions(len(y), interval, horizon=HORIZON, folds=folds, test_days=TEST_DAYS)
    med, p90, act = [], [], []
    for p in pos:
        q = oracle_quantiles(
            c, raw, int(p), HORIZON, rng, sims=sims, levels=(0.5, 0.9), blind=blind
        )
        med.append(q[0])
        p90.append(q[1])
        act.append(y[int(p) : int(p) + HORIZON])
    a, m, u = np.concatenate(act), np.concatenate(med), np.concatenate(p90)
    return {
        "mase": metrics.mase(a, m, y[: int(pos[0])], interval),
        "p90_coverage": metrics.coverage(a, u),
    }


ORACLES = ("oracle", "oracle_blind")  # knows the noise's state / infers it from the series


def _num(x: float | None) -> str:
    return f"{x:6.3f}" if x is not None else f"{'–':>6s}"


def summarise(rows: dict[str, dict]) -> list[str]:
    lines = [
        "| interval | traces | model | ≤ 0.8× s.naive | ratio min–median–max "
        "| p90 cov in 0.85–0.95 (7 folds) | p90 cov (7 folds) min–max "
        "| p90 cov, 84 origins mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, interval, _ in SEED_SHAPES.values():
        group = [r for r in rows.values() if r["interval_s"] == interval]
        if not group:
            continue
        for model in (*ORACLES, "kale"):
            rs = [r[model] for r in group if model in r]
            if not rs:
                continue
            ratios = [r["ratio"] for r in rs]
            c7 = [r["p90_coverage"] for r in rs]
            c84 = [r["p90_coverage_dense"] for r in rs if "p90_coverage_dense" in r]
            lines.append(
                f"| {label.split(',')[0]} | {len(rs)} | {model} "
                f"| {sum(x <= MASE_RATIO for x in ratios)}/{len(rs)} "
                f"| {min(ratios):.2f}–{np.median(ratios):.2f}–{max(ratios):.2f} "
                f"| {sum(COVERAGE[0] <= x <= COVERAGE[1] for x in c7)}/{len(rs)} "
                f"| {min(c7):.2f}–{max(c7):.2f} "
                f"| {f'{np.mean(c84):.3f}' if c84 else '–'} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces", default="", help=f"named generated traces ({','.join(GENERATED)}); default none"
    )
    ap.add_argument(
        "--seeds",
        default="11-16",
        help="fresh generated traces, e.g. 11-40 (default 11-16; '' for none)",
    )
    ap.add_argument(
        "--shapes",
        default=",".join(SEED_SHAPES),
        help=f"shapes for --seeds: {','.join(SEED_SHAPES)}",
    )
    ap.add_argument("--sims", type=int, default=400, help="Monte Carlo paths per origin")
    ap.add_argument(
        "--dense-folds",
        type=int,
        default=84,
        help="also score the oracle on this many origins; 0 to skip",
    )
    ap.add_argument("--compare", help="benchmarks.forecast --json-out results: add kale's numbers")
    ap.add_argument("--json-out", help="also write the results here")
    args = ap.parse_args(argv)
    names = [t for t in args.traces.split(",") if t]
    unknown = [t for t in names if t not in GENERATED]
    if unknown:
        ap.error(f"--traces: unknown {', '.join(unknown)} (choose from {', '.join(GENERATED)})")
    if args.seeds:
        names += seed_traces_from_args(ap, args.seeds, args.shapes)
    if args.sims < 10:
        ap.error("--sims: at least 10")
    compare: dict = {}
    if args.compare:
        try:
            compare = json.loads(Path(args.compare).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--compare: cannot read {args.compare}: {exc}")
    warnings.simplefilter("ignore")
    rows: dict[str, dict] = {}

    def head(label: str) -> str:
        return f"   {label:>6s} {'ratio':>6s} {'cov7':>6s} {'cov84':>6s}"

    print(
        f"{'trace':18s} {'s.naive':>8s}{head('oracle')}{head('blind')}"
        f"{head('kale') if compare else ''}"
    )
    for name in names:
        c = trace_components(**GENERATED[name][1])
        series = c.series()
        interval = float((c.index[1] - c.index[0]).total_seconds())
        sn = (
            backtest(
                series,
                {"seasonal_naive": lambda: make_forecaster("seasonal_naive", horizon=HORIZON)},
                horizon=HORIZON,
                folds=FOLDS,
                test_days=TEST_DAYS,
            )
            .models["seasonal_naive"]
            .metrics["mase"]
        )
        row = {"label": GENERATED[name][0], "interval_s": interval, "seasonal_naive_mase": sn}
        for model in ORACLES:
            blind = model == "oracle_blind"
            rng = np.random.default_rng(zlib.crc32(name.encode() + (b":blind" if blind else b"")))
            oracle = score(c, FOLDS, rng, args.sims, blind=blind)
            oracle["ratio"] = oracle["mase"] / sn
            if args.dense_folds:
                oracle["p90_coverage_dense"] = score(
                    c, args.dense_folds, rng, args.sims, blind=blind
                )["p90_coverage"]
            row[model] = oracle
        kale_line = ""
        if name in compare and "kale" in compare[name].get("models", {}):
            k = compare[name]["models"]["kale"]
            kale = {
                "mase": k["mase"],
                "p90_coverage": k["p90_coverage"],
                "ratio": k["mase"] / compare[name]["models"]["seasonal_naive"]["mase"],
            }
            if "kale_dense" in compare[name]:
                kale["p90_coverage_dense"] = compare[name]["kale_dense"]["p90_coverage"]
            row["kale"] = kale
            dense = kale.get("p90_coverage_dense")
            kale_line = (
                f"   {kale['mase']:6.3f} {kale['ratio']:6.3f} "
                f"{kale['p90_coverage']:6.3f} {_num(dense)}"
            )
        rows[name] = row
        cols = "".join(
            f"   {row[m]['mase']:6.3f} {row[m]['ratio']:6.3f} "
            f"{row[m]['p90_coverage']:6.3f} {_num(row[m].get('p90_coverage_dense'))}"
            for m in ORACLES
        )
        print(f"{name:18s} {sn:8.3f}{cols}{kale_line}", flush=True)
    print("\n## by interval")
    print("\n".join(summarise(rows)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
