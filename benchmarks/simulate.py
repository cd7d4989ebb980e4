"""Benchmark of the autoscaler: every policy on several traces, judged by the same rules.

Run from the repository root::

    .venv/bin/python -m benchmarks.simulate                      # default traces, kale forecaster
    .venv/bin/python -m benchmarks.simulate --forecaster seasonal_naive --json-out sim.json
    .venv/bin/python -m benchmarks.simulate --trace my.csv --trace other.csv

The setting the project's targets are stated for: rescale 5 min, SLO 10 min, 1-minute steps,
``--scale-peak 0.8``,
7 days of warm-up, the example sync job and its fitted throughput model, and the offline
``optimal`` beside every policy (``regret`` = GPU-hours over optimal's; Σminw is the per-step
sizing reference ``lower_bound_gpu_hours``). Per-policy seconds are measured here, not in
tests. Traces: generated 28-day traces (two seeds) plus every real trace given with
``--trace`` (default: the NASA trace in the shared data folder when present,
:mod:`benchmarks.paths`). Prints a table per trace, the targets as pass/fail lines, and a
JSON document. Forecaster fits are cached
(``~/.cache/kale/fits``), so a second run costs only the simulation. Not a test: numbers are
printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from autoscaler.job.loading import load_job
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.sizing import sizing_for
from autoscaler.sim.forecasting import default_cache_dir, source_factory
from autoscaler.sim.optimal import OptimalSettings
from autoscaler.sim.runner import compare, optimal_metrics, scale_to_peak
from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import load_trace
from benchmarks.paths import ROOT, add_data_flag, nasa_trace
from kale.terminal.output import table
from throughput.model import ThroughputModel

POLICIES = ["kale", "hpa", "keda", "autopilot", "madu", "static", "oracle"]
NOISY = 0.25
"""Relative noise of the noisy generated traces (the generator's default is 0.04): minute
to minute, like web traffic on 1-minute steps."""


def overrides_of(items: list[str]) -> dict[str, Any]:
    """``--set field=value`` pairs as KaleSettings overrides (typed like the field)."""
    defaults = {f.name: getattr(KaleSettings(), f.name) for f in fields(KaleSettings)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in defaults:
            raise SystemExit(f"--set: expected FIELD=VALUE with a KaleSettings field, got {item!r}")
        like = defaults[key]
        if isinstance(like, bool):
            out[key] = text.lower() in ("1", "true", "yes", "on")
        elif isinstance(like, int):
            out[key] = int(text)
        elif isinstance(like, float) or like is None:
            out[key] = float(text)
        else:
            out[key] = text
    return out


def traces(
    paths: list[str],
    days: int,
    seeds: list[int],
    real: Path | None,
    noisy: list[int] = [],  # noqa: B006 (read only)
    noise: float = NOISY,
) -> list[tuple[str, pd.Series]]:
    """Generated traces for ``seeds``, noisy ones (``noise``) for ``noisy``, then ``paths``
    (none given: ``real`` if it exists)."""
    out = [
        (f"generated seed {s}", generate_trace(days=days, interval_s=60, peak_trough=20, seed=s))
        for s in seeds
    ]
    out += [
        (
            f"noisy seed {s}",
            generate_trace(days=days, interval_s=60, peak_trough=20, seed=s, noise=noise),
        )
        for s in noisy
    ]
    for p in paths or ([str(real)] if real is not None and real.exists() else []):
        out.append((Path(p).name, load_trace(p).series))
    return out


def targets(m: dict, lb: float, best: dict, elapsed: dict) -> list[tuple[str, bool, str]]:
    """The project's simulation targets for one trace."""
    k, h, o = m["kale"], m["hpa"], m["oracle"]
    opt = best["gpu_hours"]
    fast = sum(v for n, v in elapsed.items() if n != "optimal")
    return [
        ("violations ≤ 1 %", k["slo_violation_rate"] <= 0.01, f"{k['slo_violation_rate']:.3%}"),
        ("GPU-h ≤ 1.15× Σminw", k["gpu_hours"] <= 1.15 * lb, f"{k['gpu_hours'] / lb:.3f}×"),
        (
            "(goal) GPU-h ≤ 1.1× optimal",
            k["gpu_hours"] <= 1.1 * opt,
            f"{k['gpu_hours'] / opt:.3f}×",
        ),
        ("oracle ≤ 1.05× Σminw", o["gpu_hours"] <= 1.05 * lb, f"{o['gpu_hours'] / lb:.3f}×"),
        (
            "cum. delay ≤ 0.4× hpa",
            k["cumulative_delay_min"] <= 0.4 * h["cumulative_delay_min"],
            f"{k['cumulative_delay_min'] / max(h['cumulative_delay_min'], 1e-9):.2f}×",
        ),
        (
            "downtime ≤ 0.5× hpa",
            k["downtime_min"] <= 0.5 * h["downtime_min"],
            f"{k['downtime_min'] / max(h['downtime_min'], 1e-9):.2f}×",
        ),
        ("≤ 12 rescales/day", k["rescales_per_day"] <= 12, f"{k['rescales_per_day']:.1f}"),
        (
            "optimal in 0.84–0.97× Σminw",
            0.84 * lb <= opt <= 0.97 * lb,
            f"{opt / lb:.3f}× (violations {best['slo_violation_rate']:.3%})",
        ),
        (
            "optimal's lower bound within 5 %",
            best["bound_gap"] is not None and best["bound_gap"] <= 0.05,
            f"bound {best['lower_bound_gpu_hours']:.1f} GPU-h, gap {best['bound_gap']:.2%}",
        ),
        (
            "planning ≤ 5 ms per decision (oracle: no forecast cost)",
            o["elapsed_s"] / o["steps_simulated"] <= 0.005,
            f"{o['elapsed_s'] / o['steps_simulated'] * 1000:.2f} ms",
        ),
        ("all policies ≤ 60 s (fits cached)", fast <= 60, f"{fast:.1f} s"),
        ("optimal ≤ 120 s", elapsed["optimal"] <= 120, f"{elapsed['optimal']:.1f} s"),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", default=[], help="real trace CSV (repeatable)")
    ap.add_argument("--days", type=int, default=28, help="days of each generated trace")
    ap.add_argument("--forecaster", default=None, help="default: the job's (kale)")
    ap.add_argument("--job", default=str(ROOT / "examples" / "ctr-sync.yaml"))
    ap.add_argument(
        "--refit",
        type=float,
        default=None,
        help="refit period in seconds (default: the job's spec.forecast.refit)",
    )
    ap.add_argument("--seeds", default="1,2", help="seeds of the generated traces")
    ap.add_argument(
        "--noisy-seeds",
        default="3,4",
        help=f"seeds of generated traces with noise {NOISY} (noisy 1-minute traffic; '' for none)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a KaleSettings field for kale, madu and oracle (e.g. window_sizing=false)",
    )
    ap.add_argument(
        "--policies", default=",".join(POLICIES), help="policies to run (optimal always runs)"
    )
    ap.add_argument(
        "--no-real", action="store_true", help="generated traces only (skip the default real trace)"
    )
    ap.add_argument(
        "--planner",
        choices=["moves", "dp"],
        default=None,
        help="Kale's planner for kale, madu and oracle (default: KaleSettings.planner)",
    )
    ap.add_argument("--json-out", default=None)
    add_data_flag(ap)
    args = ap.parse_args()

    loaded = load_job(args.job)
    model = ThroughputModel.load(loaded.throughput_model_path)
    sizing = sizing_for(loaded, model, rescale_s=300, slo_s=600, interval_s=60)
    fc = loaded.job.spec.forecast
    results = {}
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    real = None if args.no_real else nasa_trace(args.data)
    noisy = [int(x) for x in args.noisy_seeds.split(",") if x.strip()]
    overrides = overrides_of(args.set)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for name, series in traces(args.trace, args.days, seeds, real, noisy):
        values, _ = scale_to_peak(series.to_numpy(dtype=float), 0.8, sizing.peak_throughput)
        factory = source_factory(
            args.forecaster or fc.model,
            start=series.index[0],
            interval_s=60,
            horizon_steps=round(fc.horizon / 60),
            refit_s=args.refit or fc.refit,
            quantile=float(fc.quantile),
            cache_dir=default_cache_dir(),
        )
        t0 = time.perf_counter()
        comp = compare(
            sizing,
            values,
            policies,
            warmup_steps=7 * 1440,
            job=loaded.job,
            forecaster_factory=factory,
            trace_start=series.index[0],
            optimal_settings=OptimalSettings(),
            planner=args.planner,
            overrides=overrides,
        )
        elapsed = time.perf_counter() - t0
        lb = comp.lower_bound_gpu_hours
        assert comp.optimal is not None
        best = optimal_metrics(comp.optimal, lb)
        metrics = {**comp.metrics, "optimal": best}
        rows = [
            [
                p,
                f"{m['slo_violation_rate']:.3%}",
                m["cumulative_delay_min"],
                m["downtime_min"],
                m["rescales_per_day"],
                m["gpu_hours"],
                m["gpu_hours"] / lb,
                m["regret"],
                m["elapsed_s"],
            ]
            for p, m in metrics.items()
        ]
        rows.append(["Σminw", "", "", "", "", lb, 1.0, "", ""])
        rows.append(["optimal's bound", "", "", "", "", best["lower_bound_gpu_hours"], "", "", ""])
        print(f"\n## {name}  ({len(values) - 7 * 1440} evaluated steps, {elapsed:.1f} s)")
        print(
            table(
                rows,
                [
                    "policy",
                    "violations",
                    "cum_delay_min",
                    "downtime_min",
                    "rescales/day",
                    "gpu_hours",
                    "x_sum_minw",
                    "regret",
                    "seconds",
                ],
            )
        )
        times = {p: m["elapsed_s"] for p, m in metrics.items()}
        for m in metrics.values():
            m["steps_simulated"] = len(values) - 7 * 1440
        have = all(p in metrics for p in ("kale", "hpa", "oracle"))
        checks = targets(metrics, lb, best, times) if have else []
        for label, ok, value in checks:
            print(f"  [{'PASS' if ok else 'MISS'}] {label}: {value}", flush=True)
        results[name] = {
            "policies": metrics,
            "lower_bound_gpu_hours": lb,
            "elapsed_s": elapsed,
            "targets": {label: {"pass": ok, "value": v} for label, ok, v in checks},
        }
    doc = json.dumps(results, indent=2, default=float)
    if args.json_out:
        Path(args.json_out).write_text(doc)
    else:
        print(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
