"""Benchmark of incremental refits: CPU per daily refit and forecast quality, incremental
against full, on the forecasting backtest's public traces.

Run from the repository root::

    python -m benchmarks.refit                   # every trace: a table
    python -m benchmarks.refit --json            # the same as JSON (one object)
    python -m benchmarks.refit --traces gen_1m_s1,nasa_1m --days 3
    python -m benchmarks.refit --refit-steps 0   # ablation: no fine-tune, recalibration only
    python -m benchmarks.refit --json --jobs 2   # two traces at a time (same numbers, sooner)

Per trace: a full ``kale`` fit on the ``--context-days`` (21, the forecast feed's context)
before the first refit day, then ``--days`` daily refits along two chains that start from
it — each refit of the *incremental* chain starts from the chain's previous fit
(``fit(history, previous=...)``: incremental where the drift rules allow, full where they do
not), each refit of the *full* chain fits from nothing — on the same sliding histories. Each
refit is scored on the day after it (a forecast of ``--horizon`` steps every hour), both
chains on the same windows, and MASE is pooled over the days (scaled, as in the backtest, by
the daily seasonal naive's in-sample error before the first refit). Every refit's CPU time is
this process's (``time.process_time``: all its threads; the fits start no processes), and
kale's wall-clock training budget is lifted (``--time-budget``) so that a loaded machine does
not cut the full fits short.

``--json`` prints ``incremental_cpu_s_p50`` (median CPU seconds of the incremental chain's
refits, whichever kind each one was), ``full_cpu_s_p50`` (of the full chain's),
``mase_ratio_max`` (the worst trace's incremental over full MASE) and ``traces``, with more
fields beside them. Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import load_trace
from benchmarks.paths import NASA_FILE, add_data_flag, data_dir
from forecasting import metrics
from forecasting.base import Forecaster
from forecasting.registry import make_forecaster

# The forecasting backtest's public traces (benchmarks/forecast.py), by the same names.
GENERATED: dict[str, dict[str, float]] = {
    "gen_1m_s1": {"days": 28, "interval_s": 60, "seed": 1},
    "gen_1m_s2": {"days": 28, "interval_s": 60, "seed": 2, "peak_trough": 8},
    "gen_1m_s3": {"days": 28, "interval_s": 60, "seed": 3, "peak_trough": 30, "noise": 0.08},
    "gen_30m": {"days": 42, "interval_s": 1800, "seed": 4},
    "gen_1h_28d": {"days": 28, "interval_s": 3600, "seed": 5},
    "gen_1h_56d": {"days": 56, "interval_s": 3600, "seed": 6},
}
INCIDENTS: dict[str, dict[str, float]] = {
    "gen_1m_incidents": {"days": 28, "interval_s": 60, "seed": 21},
    "gen_30m_incidents": {"days": 42, "interval_s": 1800, "seed": 22},
    "gen_1h_incidents": {"days": 28, "interval_s": 3600, "seed": 23},
}
NASA: dict[str, int] = {"nasa_1m": 60, "nasa_30m": 1800, "nasa_1h": 3600}
TEST_DAYS = 7.0
"""The backtest's test window: its incidents fall in the days before it."""


def with_incidents(series: pd.Series, test_days: float = TEST_DAYS) -> pd.Series:
    """The backtest's incidents: a holiday, a 3-hour outage and a 2-hour spike at 40 %, 65 %
    and 80 % of the part before the last ``test_days`` (benchmarks/forecast.py)."""
    t = np.asarray((series.index - series.index[0]).total_seconds()) / 86400.0
    fit_days = t[-1] + (t[1] - t[0]) - test_days
    factor = np.ones(len(series))
    for share, start_h, hours, times in (
        (0.40, 0.0, 24.0, 0.4),
        (0.65, 14.0, 3.0, 0.02),
        (0.80, 19.0, 2.0, 4.0),
    ):
        start = np.floor(share * fit_days) + start_h / 24.0
        factor[(t >= start) & (t < start + hours / 24.0)] *= times
    return series * factor


def averaged(series: pd.Series, interval_s: int) -> pd.Series:
    """Clock-aligned means over ``interval_s``, the partial ends dropped."""
    return series.resample(pd.Timedelta(seconds=interval_s)).mean().iloc[1:-1]


def trace_names(data: Path) -> list[str]:
    """Every trace this run can load (the NASA ones only where the file is)."""
    nasa = list(NASA) if (data / NASA_FILE).exists() else []
    return [*GENERATED, *INCIDENTS, *nasa]


def load(name: str, data: Path) -> pd.Series:
    if name in GENERATED:
        return generate_trace(**GENERATED[name])
    if name in INCIDENTS:
        return with_incidents(generate_trace(**INCIDENTS[name]))
    series = load_trace(data / NASA_FILE).series
    return series if NASA[name] == 60 else averaged(series, NASA[name])


def timed_fit(model: Forecaster, history: pd.Series, previous: Forecaster | None) -> float:
    started = time.process_time()
    model.fit(history, previous=previous)
    return time.process_time() - started


def score_day(
    model: Forecaster, series: pd.Series, at: int, day: int, horizon: int, every: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(actual, mean, p90) of forecasts from every ``every`` steps of the day after ``at``."""
    actual, mean, p90 = [], [], []
    for origin in range(at, min(at + day, len(series) - horizon + 1), every):
        fc = model.predict(horizon, history=series.iloc[:origin])
        actual.append(series.to_numpy()[origin : origin + horizon])
        mean.append(fc.mean)
        p90.append(fc.p90)
    return np.concatenate(actual), np.concatenate(mean), np.concatenate(p90)


def share_scores(
    model: Forecaster, series: pd.Series, at: int, day: int, args: argparse.Namespace, scale: float
) -> dict[float, float] | None:
    """The day's MASE had ``model`` kept each share of its network's correction on offer
    (``--by-share``: what a different kept share would have scored; None without a network)."""
    if getattr(model, "net", None) is None:
        return None
    from forecasting.calibration import ALPHAS

    every = max(1, round(3600.0 / float((series.index[1] - series.index[0]).total_seconds())))
    kept = model.alpha  # type: ignore[attr-defined]
    out = {}
    try:
        for a in ALPHAS:
            model.alpha = a  # type: ignore[attr-defined]
            actual, mean, _ = score_day(model, series, at, day, args.horizon, every)
            out[a] = metrics.mae(actual, mean) / scale
    finally:
        model.alpha = kept  # type: ignore[attr-defined]
    return out


def run_trace(name: str, series: pd.Series, args: argparse.Namespace) -> dict[str, Any]:
    interval = float((series.index[1] - series.index[0]).total_seconds())
    day = round(86400.0 / interval)
    context = round(args.context_days * day)
    # The first refit's end: each refit is scored on the day after it, every forecast whole.
    first = len(series) - args.days * day - args.horizon
    if first - day < context // 2:
        raise ValueError(f"{name}: too short for {args.days} refits")
    opts = {
        "horizon": args.horizon,
        "seed": 0,
        "refit_steps": args.refit_steps,
        "time_budget_s": args.time_budget,
    }

    def make() -> Forecaster:
        return make_forecaster("kale", **opts)

    def history(end: int) -> pd.Series:
        return series.iloc[max(0, end - context) : end]

    scale = metrics.mase_scale(series.to_numpy()[: first - day], interval)
    start = make()
    start_cpu = timed_fit(start, history(first - day), None)
    chain: Forecaster = start
    every = max(1, round(3600.0 / interval))
    rows = []
    pooled: dict[str, list[np.ndarray]] = {
        k: [] for k in ("actual", "inc", "full", "inc90", "full90")
    }
    for r in range(args.days):
        end = first + r * day
        inc = make()
        inc_cpu = timed_fit(inc, history(end), chain)
        full = make()
        full_cpu = timed_fit(full, history(end), None)
        chain = inc
        actual, m_inc, p_inc = score_day(inc, series, end, day, args.horizon, every)
        _, m_full, p_full = score_day(full, series, end, day, args.horizon, every)
        by_share = (
            {
                "mase_incremental_by_share": share_scores(inc, series, end, day, args, scale),
                "mase_full_by_share": share_scores(full, series, end, day, args, scale),
            }
            if args.by_share
            else {}
        )
        for key, v in zip(pooled, (actual, m_inc, m_full, p_inc, p_full), strict=True):
            pooled[key].append(v)
        refit = inc.fit_summary.get("refit", {})
        rows.append(
            {
                "day": str(series.index[end - 1].date()),
                "mode": refit.get("mode"),
                "reason": refit.get("reason"),
                "incremental_cpu_s": inc_cpu,
                "full_cpu_s": full_cpu,
                "mase_incremental": metrics.mae(actual, m_inc) / scale,
                "mase_full": metrics.mae(actual, m_full) / scale,
                "kept_share_incremental": inc.fit_summary.get("median_correction_kept"),
                "kept_share_full": full.fit_summary.get("median_correction_kept"),
                "fine_tuned_networks_kept": sum(
                    bool(m.get("kept")) for m in inc.fit_summary.get("member_runs", [])
                )
                if refit.get("mode") == "incremental"
                else None,
                **by_share,
                **(
                    {
                        "val_mae_by_share_part_incremental": inc.fit_summary.get(
                            "val_mae_by_kept_share_and_part"
                        ),
                        "val_mae_by_share_part_full": full.fit_summary.get(
                            "val_mae_by_kept_share_and_part"
                        ),
                    }
                    if args.by_share
                    else {}
                ),
            }
        )
        if args.verbose:
            print(f"  {name} {rows[-1]}", file=sys.stderr)
    a = np.concatenate(pooled["actual"])
    mase_inc = metrics.mae(a, np.concatenate(pooled["inc"])) / scale
    mase_full = metrics.mae(a, np.concatenate(pooled["full"])) / scale
    return {
        "interval_s": interval,
        "refits": rows,
        "start_full_fit_cpu_s": start_cpu,
        "mase_incremental": mase_inc,
        "mase_full": mase_full,
        "mase_ratio": mase_inc / mase_full if mase_full > 0 else float("nan"),
        "p90_coverage_incremental": metrics.coverage(a, np.concatenate(pooled["inc90"])),
        "p90_coverage_full": metrics.coverage(a, np.concatenate(pooled["full90"])),
        "incremental_share": float(np.mean([row["mode"] == "incremental" for row in rows])),
    }


def trace_result(name: str, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_trace` of the trace called ``name`` (in a worker process with ``--jobs``)."""
    warnings.filterwarnings("ignore")
    return run_trace(name, load(name, data), args)


def summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [row for res in results.values() for row in res["refits"]]
    inc = [row["incremental_cpu_s"] for row in rows]
    ran_inc = [row["incremental_cpu_s"] for row in rows if row["mode"] == "incremental"]
    return {
        "incremental_cpu_s_p50": float(np.median(inc)),
        "full_cpu_s_p50": float(np.median([row["full_cpu_s"] for row in rows])),
        "mase_ratio_max": float(max(res["mase_ratio"] for res in results.values())),
        "traces": sorted(results),
        "incremental_only_cpu_s_p50": float(np.median(ran_inc)) if ran_inc else None,
        "incremental_cpu_s_max": float(np.max(inc)),
        "incremental_share": float(np.mean([row["mode"] == "incremental" for row in rows])),
        "refits": len(rows),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "per_trace": results,
    }


def table(out: dict[str, Any]) -> str:
    lines = [
        f"{'trace':<18} {'refits':>6} {'incr.':>5} {'inc CPU s p50':>13} "
        f"{'full CPU s p50':>14} {'MASE inc':>8} {'MASE full':>9} {'ratio':>6} "
        f"{'p90 cov inc/full':>16}"
    ]
    for name, res in out["per_trace"].items():
        rows = res["refits"]
        lines.append(
            f"{name:<18} {len(rows):>6} {res['incremental_share']:>5.0%} "
            f"{np.median([r['incremental_cpu_s'] for r in rows]):>13.2f} "
            f"{np.median([r['full_cpu_s'] for r in rows]):>14.2f} "
            f"{res['mase_incremental']:>8.3f} {res['mase_full']:>9.3f} "
            f"{res['mase_ratio']:>6.3f} "
            f"{res['p90_coverage_incremental']:>7.2f}/{res['p90_coverage_full']:.2f}"
        )
    lines.append(
        f"incremental refit CPU p50 {out['incremental_cpu_s_p50']:.2f} s "
        f"(max {out['incremental_cpu_s_max']:.2f} s; {out['incremental_share']:.0%} ran "
        f"incrementally), full refit CPU p50 {out['full_cpu_s_p50']:.2f} s, worst MASE ratio "
        f"{out['mase_ratio_max']:.3f}; load average {out['load_average'][0]:.2f} on "
        f"{out['cpu_count']} CPUs"
    )
    fulls = [
        f"{name} {r['day']}: {r['reason']}"
        for name, res in out["per_trace"].items()
        for r in res["refits"]
        if r["mode"] != "incremental"
    ]
    if fulls:
        lines.append("full refits in the incremental chain:")
        lines.extend(f"  {x}" for x in fulls)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--days", type=int, default=7, help="daily refits per trace (default 7)")
    ap.add_argument("--context-days", type=float, default=21.0, help="history per fit (21)")
    ap.add_argument("--horizon", type=int, default=60, help="forecast steps (60)")
    ap.add_argument(
        "--refit-steps", type=int, default=None, help="kale's refit_steps (default: its own)"
    )
    ap.add_argument(
        "--time-budget",
        type=float,
        default=3600.0,
        help="kale's training time budget in wall seconds (3600: on a shared machine the "
        "default 90 s would cut full fits short and make them depend on the load)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="traces run in this many processes at once (each refit's CPU is its own "
        "process's, so the numbers do not change; the wall time does)",
    )
    add_data_flag(ap)
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--verbose", action="store_true", help="one line per refit on stderr")
    ap.add_argument(
        "--by-share",
        action="store_true",
        help="also score every refit with each kept share of the network's correction on "
        "offer (a diagnostic: per refit, mase_incremental_by_share and mase_full_by_share)",
    )
    args = ap.parse_args(argv)
    if args.refit_steps is None:
        from forecasting.transformer.forecaster import KaleForecaster

        args.refit_steps = int(KaleForecaster().params["refit_steps"])
    data = data_dir(args.data)
    available = trace_names(data)
    names = [n for n in (args.traces or ",".join(available)).split(",") if n]
    unknown = [n for n in names if n not in available]
    if unknown:
        ap.error(f"--traces: unknown {', '.join(unknown)} (choose from {', '.join(available)})")
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            futures = {n: pool.submit(trace_result, n, data, args) for n in names}
            results = {n: f.result() for n, f in futures.items()}
    else:
        results = {n: trace_result(n, data, args) for n in names}
    out = {**summary(results), "days": args.days, "jobs": args.jobs}
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
