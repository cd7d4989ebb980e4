"""Benchmark of the autoscaler: every policy on several traces, judged by the same rules.

Run from the repository root::

    .venv/bin/python benchmarks/simulate.py                      # default traces, kale forecaster
    .venv/bin/python benchmarks/simulate.py --forecaster seasonal_naive --json-out sim.json
    .venv/bin/python benchmarks/simulate.py --trace my.csv --trace other.csv

Setting of the issue: rescale 5 min, SLO 10 min, 1-minute steps, ``--scale-peak 0.8``, 7 days of
warm-up, the example sync job and its fitted throughput model. Traces: generated 28-day traces
(two seeds) plus every real trace given with ``--trace`` (default: the NASA trace in
``../shared/data`` when present). Prints a table per trace, the targets of the issue as
pass/fail lines, and a JSON document. Forecaster fits are cached (``~/.cache/kale/fits``), so a
second run costs only the simulation. Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.config import load_job  # noqa: E402
from autoscaler.policy.sizing import sizing_for  # noqa: E402
from autoscaler.sim.forecasting import default_cache_dir, source_factory  # noqa: E402
from autoscaler.sim.runner import compare, scale_to_peak  # noqa: E402
from autoscaler.terminal.output import table  # noqa: E402
from autoscaler.tracegen import generate_trace  # noqa: E402
from autoscaler.traces import load_trace  # noqa: E402
from throughput.model import ThroughputModel  # noqa: E402

POLICIES = ["kale", "hpa", "keda", "autopilot", "madu", "static", "oracle"]
REAL = ROOT.parent / "shared" / "data" / "nasa_http_jul1995_1min.csv"


def traces(
    paths: list[str], days: int, seeds: list[int], real: bool = True
) -> list[tuple[str, object]]:
    out = [
        (f"generated seed {s}", generate_trace(days=days, interval_s=60, peak_trough=20, seed=s))
        for s in seeds
    ]
    for p in paths or ([str(REAL)] if real and REAL.exists() else []):
        out.append((Path(p).name, load_trace(p).series))
    return out


def targets(m: dict, lb: float) -> list[tuple[str, bool, str]]:
    k, h, madu, static = m["kale"], m["hpa"], m["madu"], m["static"]
    others = [n for n in m if n not in ("kale", "static", "oracle")]
    return [
        ("violations ≤ 1 %", k["slo_violation_rate"] <= 0.01, f"{k['slo_violation_rate']:.2%}"),
        (
            "cum. delay ≤ 0.3× hpa",
            k["cumulative_delay_min"] <= 0.3 * h["cumulative_delay_min"],
            f"{k['cumulative_delay_min'] / max(h['cumulative_delay_min'], 1e-9):.2f}×",
        ),
        (
            "downtime ≤ 0.5× hpa",
            k["downtime_min"] <= 0.5 * h["downtime_min"],
            f"{k['downtime_min'] / max(h['downtime_min'], 1e-9):.2f}×",
        ),
        ("GPU-h ≤ 1.5× lower bound", k["gpu_hours"] <= 1.5 * lb, f"{k['gpu_hours'] / lb:.2f}×"),
        (
            "GPU-h < madu",
            k["gpu_hours"] < madu["gpu_hours"],
            f"{k['gpu_hours']:.0f} vs {madu['gpu_hours']:.0f}",
        ),
        (
            "GPU-h ≤ 0.5× static",
            k["gpu_hours"] <= 0.5 * static["gpu_hours"],
            f"{k['gpu_hours'] / static['gpu_hours']:.2f}×",
        ),
        (
            "fewest violations but static",
            all(k["slo_violation_rate"] <= m[o]["slo_violation_rate"] for o in others),
            ", ".join(f"{o} {m[o]['slo_violation_rate']:.2%}" for o in others),
        ),
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
        "--no-real", action="store_true", help="generated traces only (skip the default real trace)"
    )
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()

    loaded = load_job(args.job)
    model = ThroughputModel.load(loaded.throughput_model_path)
    sizing = sizing_for(loaded, model, rescale_s=300, slo_s=600, interval_s=60)
    fc = loaded.job.spec.forecast
    results = {}
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    for name, series in traces(args.trace, args.days, seeds, real=not args.no_real):
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
            POLICIES,
            warmup_steps=7 * 1440,
            job=loaded.job,
            forecaster_factory=factory,
            trace_start=series.index[0],
        )
        elapsed = time.perf_counter() - t0
        lb = comp.lower_bound_gpu_hours
        rows = [
            [
                p,
                f"{m['slo_violation_rate']:.2%}",
                m["cumulative_delay_min"],
                m["downtime_min"],
                m["rescale_count"],
                m["gpu_hours"],
                m["gpu_hours"] / lb,
                m["elapsed_s"],
            ]
            for p, m in comp.metrics.items()
        ]
        rows.append(["lower_bound", "", "", "", "", lb, 1.0, ""])
        print(f"\n## {name}  ({len(values) - 7 * 1440} evaluated steps, {elapsed:.1f} s)")
        print(
            table(
                rows,
                [
                    "policy",
                    "violations",
                    "cum_delay_min",
                    "downtime_min",
                    "rescales",
                    "gpu_hours",
                    "x_lower_bound",
                    "seconds",
                ],
            )
        )
        checks = targets(comp.metrics, lb)
        for label, ok, value in checks:
            print(f"  [{'PASS' if ok else 'MISS'}] {label}: {value}")
        results[name] = {
            "policies": comp.metrics,
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
