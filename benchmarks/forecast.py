"""Benchmark of the workload predictor: every model, backtested on generated and real traces.

Run from the repository root::

    .venv/bin/python -m benchmarks.forecast                       # all traces, table + verdict
    .venv/bin/python -m benchmarks.forecast --traces nasa_1m --json-out bench.json
    .venv/bin/python -m benchmarks.forecast --device cuda         # kale trained on a GPU
    .venv/bin/python -m benchmarks.forecast --seeds 11-16 --only-seeds   # fresh generated
                                                      # traces, summarised per interval
    .venv/bin/python -m benchmarks.forecast --seeds 24-29 --only-seeds --incidents
    .venv/bin/python -m benchmarks.forecast --structures  # no season, a DST clock change, …
    .venv/bin/python -m benchmarks.forecast --csv my_trace.csv --only-csv   # your own trace

Per trace: ``forecasting.backtest.backtest`` with horizon 60 steps, 7 folds, 7 test days
(each model fitted once before the test window). Traces: generated 1-minute (28 days, three
seeds and peak/trough ratios), 30-minute (42 days) and 1-hour (28 and 56 days) ones, one per
interval with a holiday, an outage and a spike in its fit window (``with_incidents``), the real
NASA July 1995 trace (1 minute) from the shared data folder when present, and the same NASA trace
averaged to 30 minutes and 1 hour (real traffic at the coarser intervals). The verdict checks
the targets of the forecasting issue: kale has the lowest MASE, at most 0.8x seasonal naive's,
p90 coverage within 0.85-0.95, fit <= 120 s (28 days of 1-minute data), predict <= 50 ms.
Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import load_trace
from benchmarks.forecast_structures import STRUCTURES
from benchmarks.paths import add_data_flag, nasa_trace
from common.errors import UserError
from forecasting.backtest import backtest
from forecasting.registry import MODEL_NAMES, make_forecaster

HORIZON, FOLDS, TEST_DAYS = 60, 7, 7.0
FIT_LIMIT_S, PREDICT_LIMIT_MS = 120.0, 50.0
COVERAGE = (0.85, 0.95)
MASE_RATIO = 0.8


def averaged(series: pd.Series, interval_s: int) -> pd.Series:
    """The trace averaged over clock-aligned buckets of ``interval_s``, partial ends dropped."""
    out = series.resample(pd.Timedelta(seconds=interval_s)).mean()
    return out.iloc[1:-1]  # the first and last buckets are partial


def _nasa(path: Path, interval_s: int) -> Callable[[], pd.Series]:
    def load() -> pd.Series:
        series = load_trace(path).series
        return series if interval_s == 60 else averaged(series, interval_s)

    return load


def nasa_traces(path: Path) -> dict[str, tuple[str, Callable[[], pd.Series]]]:
    """The real NASA trace at 1 minute and averaged to 30 minutes and 1 hour."""
    return {
        "nasa_1m": ("real: NASA HTTP Jul 1995, 1 min, 27.6 d", _nasa(path, 60)),
        "nasa_30m": ("real: NASA HTTP Jul 1995, averaged to 30 min", _nasa(path, 1800)),
        "nasa_1h": ("real: NASA HTTP Jul 1995, averaged to 1 h", _nasa(path, 3600)),
    }


# Generated traces by their generator arguments (``experiments/forecast_oracle.py`` rebuilds
# the same traces part by part, so they are kept as data, not only as loaders).
GENERATED: dict[str, tuple[str, dict[str, float]]] = {
    "gen_1m_s1": (
        "generated, 1 min, 28 d, peak/trough 20",
        {"days": 28, "interval_s": 60, "seed": 1},
    ),
    "gen_1m_s2": (
        "generated, 1 min, 28 d, peak/trough 8",
        {"days": 28, "interval_s": 60, "seed": 2, "peak_trough": 8},
    ),
    "gen_1m_s3": (
        "generated, 1 min, 28 d, peak/trough 30, more noise",
        {"days": 28, "interval_s": 60, "seed": 3, "peak_trough": 30, "noise": 0.08},
    ),
    "gen_30m": ("generated, 30 min, 42 d", {"days": 42, "interval_s": 1800, "seed": 4}),
    "gen_1h_28d": ("generated, 1 h, 28 d", {"days": 28, "interval_s": 3600, "seed": 5}),
    "gen_1h_56d": ("generated, 1 h, 56 d", {"days": 56, "interval_s": 3600, "seed": 6}),
}


def with_incidents(series: pd.Series, test_days: float = TEST_DAYS) -> pd.Series:
    """The trace with three incidents in the part the models are fitted on.

    Real traces have them (NASA's 4 July, its logging gaps); the generator does not. At 40 %,
    65 % and 80 % of the fit window (whole days in): a holiday (that day at 40 %), a 3-hour
    outage from 14:00 (2 %) and a 2-hour spike from 19:00 (4x). The test week is untouched,
    so the score says what an incident costs the weeks after it.
    """
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


INCIDENTS: dict[str, tuple[str, dict[str, float]]] = {
    "gen_1m_incidents": (
        "generated, 1 min, 28 d, holiday + outage + spike",
        {"days": 28, "interval_s": 60, "seed": 21},
    ),
    "gen_30m_incidents": (
        "generated, 30 min, 42 d, holiday + outage + spike",
        {"days": 42, "interval_s": 1800, "seed": 22},
    ),
    "gen_1h_incidents": (
        "generated, 1 h, 28 d, holiday + outage + spike",
        {"days": 28, "interval_s": 3600, "seed": 23},
    ),
}

TRACES: dict[str, tuple[str, Callable[[], pd.Series]]] = {
    **{
        name: (label, lambda kw=kw: generate_trace(**kw)) for name, (label, kw) in GENERATED.items()
    },
    **{
        name: (label, lambda kw=kw: with_incidents(generate_trace(**kw)))
        for name, (label, kw) in INCIDENTS.items()
    },
    **nasa_traces(nasa_trace()),
}


SEED_SHAPES: dict[str, tuple[str, float, float]] = {
    # label suffix, interval (s), days — the generator's defaults otherwise
    "1m": ("1 min, 28 d", 60, 28),
    "30m": ("30 min, 42 d", 1800, 42),
    "1h": ("1 h, 28 d", 3600, 28),
}


def add_seed_traces(seeds: list[int], shapes: list[str], incidents: bool = False) -> list[str]:
    """Register generated traces ``gen_<shape>_seed<N>`` (default generator settings).

    The named traces above are a dozen samples; whether kale's targets hold *in general* at
    an interval is a question about many traces, so ``--seeds`` adds fresh draws of each
    shape; with ``incidents``, each with :func:`with_incidents` (``..._incidents``).
    """
    names = []
    for shape in shapes:
        label, interval, days = SEED_SHAPES[shape]
        for seed in seeds:
            kwargs = {"days": days, "interval_s": interval, "seed": seed}
            if incidents:
                name = f"gen_{shape}_seed{seed}_incidents"
                TRACES[name] = (
                    f"generated, {label}, seed {seed}, holiday + outage + spike",
                    lambda kw=kwargs: with_incidents(generate_trace(**kw)),
                )
            else:
                name = f"gen_{shape}_seed{seed}"
                GENERATED[name] = (f"generated, {label}, seed {seed}", kwargs)
                TRACES[name] = (GENERATED[name][0], lambda kw=kwargs: generate_trace(**kw))
            names.append(name)
    return names


def parse_seeds(text: str) -> list[int]:
    """``11-16`` or ``3,5,9``."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def seed_traces_from_args(
    ap: argparse.ArgumentParser, seeds: str, shapes: str, incidents: bool = False
) -> list[str]:
    """Check ``--seeds``/``--shapes`` (an argparse error names the flag) and register the
    traces they ask for (:func:`add_seed_traces`)."""
    wanted = [x for x in shapes.split(",") if x]
    unknown = [x for x in wanted if x not in SEED_SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {', '.join(unknown)} (choose from {', '.join(SEED_SHAPES)})")
    try:
        numbers = parse_seeds(seeds)
    except ValueError:
        ap.error(f"--seeds: expected e.g. 11-16 or 3,5,9, got {seeds!r}")
    return add_seed_traces(numbers, wanted, incidents)


def summarise_by_interval(results: dict[str, dict]) -> list[str]:
    """Per interval: how often each target holds, kale's MASE ratio and coverage spread."""
    lines = [
        "| interval | traces | lowest MASE | ≤ 0.8× s.naive | kale / s.naive (min–median–max)"
        " | p90 cov in 0.85–0.95 (7 folds) | p90 cov (7 folds) min–max | p90 cov dense"
        " (mean, min–max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by: dict[float, list[dict]] = {}
    for data in results.values():
        by.setdefault(data["interval_s"], []).append(data)
    for interval in sorted(by):
        rows = by[interval]
        checks = [r["verdict"]["checks"] for r in rows]
        ratios = [
            r["verdict"]["kale_vs_seasonal_naive"]
            for r in rows
            if r["verdict"]["kale_vs_seasonal_naive"] is not None
        ]
        covs = [r["verdict"]["p90_coverage"] for r in rows if r["verdict"]["p90_coverage"]]
        dense = [r["kale_dense"]["p90_coverage"] for r in rows if "kale_dense" in r]
        n = len(rows)

        def count(key: str, cs: list[dict] = checks, n: int = n) -> str:
            return f"{sum(bool(c.get(key)) for c in cs)}/{n}"

        def spread(xs: list[float]) -> str:
            return f"{min(xs):.2f}–{float(np.median(xs)):.2f}–{max(xs):.2f}" if xs else "–"

        lines.append(
            f"| {interval / 60:g} min | {n} | {count('lowest_mase')} | "
            f"{count('mase_le_0.8x_seasonal_naive')} | {spread(ratios)} | "
            f"{count('p90_coverage_0.85_0.95')} | "
            f"{(f'{min(covs):.2f}–{max(covs):.2f}' if covs else '–')} | "
            f"{(f'{np.mean(dense):.3f} ({min(dense):.2f}–{max(dense):.2f})' if dense else '–')} |"
        )
    return lines


def verdict(name: str, models: dict[str, dict], interval_s: float) -> dict[str, object]:
    """Which targets hold on one trace."""
    kale = models.get("kale", {})
    ok_models = {k: v for k, v in models.items() if v.get("mase") is not None}
    best = min(ok_models, key=lambda k: ok_models[k]["mase"]) if ok_models else None
    sn = models.get("seasonal_naive", {}).get("mase")
    out: dict[str, object] = {
        "kale_lowest_mase": best == "kale",
        "best_model": best,
        "kale_vs_seasonal_naive": (kale["mase"] / sn) if kale.get("mase") and sn else None,
        "p90_coverage": kale.get("p90_coverage"),
        "fit_seconds": kale.get("fit_seconds"),
        "predict_ms": kale.get("predict_ms"),
    }
    ratio = out["kale_vs_seasonal_naive"]
    cov = kale.get("p90_coverage")
    out["checks"] = {
        "lowest_mase": best == "kale",
        "mase_le_0.8x_seasonal_naive": ratio is not None and ratio <= MASE_RATIO,
        "p90_coverage_0.85_0.95": cov is not None and COVERAGE[0] <= cov <= COVERAGE[1],
        "predict_le_50ms": (kale.get("predict_ms") or 1e9) <= PREDICT_LIMIT_MS,
    }
    if interval_s == 60:
        out["checks"]["fit_le_120s"] = (kale.get("fit_seconds") or 1e9) <= FIT_LIMIT_S
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=",".join(TRACES), help="comma-separated trace names")
    ap.add_argument("--models", default=",".join(MODEL_NAMES))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", help="also write the full results here")
    ap.add_argument(
        "--dense-folds",
        type=int,
        default=84,
        help="also backtest kale with this many origins (coverage on 7 folds of "
        "one week is noisy); 0 to skip",
    )
    ap.add_argument(
        "--seeds",
        help="also run fresh generated traces with these seeds "
        "(e.g. 11-16) and summarise per interval; with --shapes",
    )
    ap.add_argument(
        "--shapes", default="1m,30m,1h", help=f"shapes for --seeds: {','.join(SEED_SHAPES)}"
    )
    ap.add_argument("--only-seeds", action="store_true", help="with --seeds: skip the named traces")
    ap.add_argument(
        "--incidents",
        action="store_true",
        help="with --seeds: add a holiday, an outage and a spike to each fresh trace",
    )
    ap.add_argument(
        "--dense-all",
        action="store_true",
        help="backtest every model (not only kale) with --dense-folds origins",
    )
    ap.add_argument(
        "--structures",
        action="store_true",
        help="run the traces of forecast_structures.py instead of the named ones: "
        "no season, daylight-saving clock changes (of all or part of the "
        "traffic), a level shift, small counts, 5- and 15-minute intervals",
    )
    ap.add_argument(
        "--csv",
        action="append",
        default=[],
        metavar="PATH",
        help="also backtest this trace file (timestamp,value; repeatable), e.g. "
        "a real trace of your own; named after the file",
    )
    ap.add_argument("--only-csv", action="store_true", help="with --csv: skip the named traces")
    ap.add_argument(
        "--average",
        action="append",
        default=[],
        type=int,
        metavar="SECONDS",
        help="with --csv: also backtest each file averaged to this interval "
        "(repeatable), e.g. 1800 and 3600 for a 5-minute trace",
    )
    add_data_flag(ap)
    args = ap.parse_args(argv)
    nasa = nasa_trace(args.data)
    TRACES.update(nasa_traces(nasa))
    TRACES.update(STRUCTURES)
    trace_names = (
        [] if args.only_seeds or args.only_csv else [t for t in args.traces.split(",") if t]
    )
    if args.structures:
        trace_names = list(STRUCTURES)
    for path in args.csv:
        try:
            trace = load_trace(path)
        except UserError as exc:
            ap.error(f"--csv: {exc}")
        name = Path(path).stem
        TRACES[name] = (f"file {path}", lambda s=trace.series: s)
        trace_names.append(name)
        for seconds in args.average:
            if seconds <= trace.interval_s or seconds % trace.interval_s:
                ap.error(
                    f"--average {seconds}: not a multiple of {path}'s interval "
                    f"({trace.interval_s:g} s)"
                )
            coarse = averaged(trace.series, seconds)
            if coarse.isna().any():
                ap.error(f"--average {seconds}: {path} has gaps longer than {seconds} s")
            label = f"{seconds // 60}m" if seconds < 3600 else f"{seconds / 3600:g}h"
            TRACES[f"{name}_{label}"] = (f"file {path}, averaged to {label}", lambda s=coarse: s)
            trace_names.append(f"{name}_{label}")
    if args.seeds:
        trace_names += seed_traces_from_args(ap, args.seeds, args.shapes, args.incidents)
    unknown = [t for t in trace_names if t not in TRACES]
    if unknown:
        ap.error(f"--traces: unknown {', '.join(unknown)} (choose from {', '.join(TRACES)})")
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    names = [m for m in args.models.split(",") if m]
    results: dict[str, dict] = {}
    for trace_name in trace_names:
        label, load = TRACES[trace_name]
        if trace_name.startswith("nasa") and not nasa.exists():
            print(f"\n## {trace_name}: skipped ({nasa} not found)")
            continue
        series = load()
        interval = float((series.index[1] - series.index[0]).total_seconds())
        factories = {
            m: (lambda m=m: make_forecaster(m, horizon=HORIZON, device=args.device, seed=args.seed))
            for m in names
        }
        res = backtest(series, factories, horizon=HORIZON, folds=FOLDS, test_days=TEST_DAYS)
        data = res.to_dict()
        data["label"] = label
        data["interval_s"] = interval
        data["days"] = len(series) * interval / 86400
        kale_summary = res.models["kale"].fit_summary if "kale" in res.models else {}
        data["kale_fit_summary"] = {
            k: kale_summary.get(k)
            for k in (
                "device",
                "epochs_run",
                "best_epoch",
                "val_pinball_backbone",
                "val_pinball",
                "median_correction_kept",
                "conformal_k_lo",
                "conformal_k_hi",
                "train_seconds",
                "decomposition_seconds",
                "time_budget_hit",
                "profile",
                "backbone_ridge",
                "outliers_replaced",
                "backbone_prior",
                "clock_changes",
                "profile_half_life_days",
                "network_skipped",
            )
        }
        data["verdict"] = verdict(trace_name, data["models"], interval)
        if args.dense_folds and "kale" in names:
            dense_models = factories if args.dense_all else {"kale": factories["kale"]}
            dense = backtest(
                series, dense_models, horizon=HORIZON, folds=args.dense_folds, test_days=TEST_DAYS
            )
            dk = dense.models["kale"].metrics
            data["kale_dense"] = {
                "folds": args.dense_folds,
                "mase": dk["mase"],
                "p90_coverage": dk["p90_coverage"],
            }
            if args.dense_all:
                data["dense"] = {
                    m: {
                        "mase": r.metrics.get("mase"),
                        "p90_coverage": r.metrics.get("p90_coverage"),
                    }
                    for m, r in dense.models.items()
                    if not r.error
                }
        results[trace_name] = data
        print(f"\n## {trace_name} — {label} ({len(series)} steps)")
        print(
            f"{'model':15s} {'MASE':>6s} {'sMAPE':>6s} {'p90cov':>6s} {'pinball':>9s} "
            f"{'fit s':>7s} {'pred ms':>8s}"
        )
        for m, v in data["models"].items():
            if v.get("error"):
                print(f"{m:15s} error: {v['error']}")
                continue
            print(
                f"{m:15s} {v['mase']:6.3f} {v['smape']:6.1f} {v['p90_coverage']:6.2f} "
                f"{v['pinball']:9.4g} {v['fit_seconds']:7.1f} {v['predict_ms']:8.1f}"
            )
        v = data["verdict"]
        ratio = v["kale_vs_seasonal_naive"]
        print(
            f"kale: best={v['best_model']} ratio_to_seasonal_naive="
            f"{ratio if ratio is None else round(ratio, 3)} "
            f"checks={ {k: ('ok' if ok else 'FAIL') for k, ok in v['checks'].items()} }"
        )
        if "kale_dense" in data:
            kd = data["kale_dense"]
            print(
                f"kale with {kd['folds']} origins: MASE {kd['mase']:.3f}, "
                f"p90 coverage {kd['p90_coverage']:.3f}"
            )
        if "dense" in data:
            print(
                f"every model with {args.dense_folds} origins (MASE, p90 coverage): "
                + ", ".join(
                    f"{m} {r['mase']:.3f} {r['p90_coverage']:.2f}" for m, r in data["dense"].items()
                )
            )
        print(f"kale fit: {data['kale_fit_summary']}")
        sys.stdout.flush()
    failing = {
        t: [k for k, ok in d["verdict"]["checks"].items() if not ok] for t, d in results.items()
    }
    print("\n## verdict")
    for t, bad in failing.items():
        print(f"{t:12s} {'all targets hold' if not bad else 'FAILS: ' + ', '.join(bad)}")
    print("\n## by interval")
    print("\n".join(summarise_by_interval(results)))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, default=str))
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
