"""How does Kale's planner do on noisy 1-minute traffic, with the true future and forecasts?

Runs the oracle (and, with ``--forecaster``, kale) on short traces — generated ones of two
noise levels and the first days of the NASA trace — with planner settings given as
``--set name=value`` (fields of :class:`autoscaler.policy.kale.KaleSettings`), beside the
offline optimum (cached in ``--cache``, it does not depend on the planner). The setting of
the project's targets: rescale 5 min, SLO 10 min, 1-minute steps, scale-peak 0.8, the
example sync job, 7 warm-up days.

    python -m experiments.noisy_planner --days 10 --seeds 1 --noisy 3 --nasa
    python -m experiments.noisy_planner --forecaster seasonal_naive --set window_sizing=false
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from autoscaler.policy.kale import KalePolicy, oracle_policy
from autoscaler.sim.engine import simulate
from autoscaler.sim.forecasting import default_cache_dir, source_factory
from experiments.noisy_setup import WARMUP, judged, setup, traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=float, default=10)
    ap.add_argument("--seeds", default="1", help="generated traces, default noise")
    ap.add_argument("--noisy", default="3", help="generated traces, noise 0.25")
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nasa", action="store_true", help="the first --days of the NASA trace")
    ap.add_argument("--nasa-offset-days", type=float, default=0.0)
    ap.add_argument("--forecaster", default=None, help="also run kale with this forecaster")
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="KaleSettings field=value")
    ap.add_argument("--cache", default="/tmp/noisy_optimal.json")
    ap.add_argument("--out", default=None, help="append the rows (JSON lines) here")
    args = ap.parse_args()

    job = setup(args.set)
    sizing, settings, changes = job.sizing, job.settings, job.changes
    fc = job.loaded.job.spec.forecast
    found = traces(
        args.days,
        args.seeds,
        args.noisy,
        args.noise,
        nasa=args.nasa,
        nasa_offset_days=args.nasa_offset_days,
    )
    for name, series in found:
        seen = judged(sizing, name, series, args.days, args.noise, Path(args.cache))
        values, lb, opt = seen.values, seen.lower_bound_gpu_hours, seen.optimal_gpu_hours
        runs: list[tuple[str, Any]] = []
        if not args.no_oracle:
            runs.append(("oracle", oracle_policy(sizing, values, settings=settings)))
        if args.forecaster:
            src = source_factory(
                args.forecaster,
                start=series.index[0],
                interval_s=60,
                horizon_steps=round(fc.horizon / 60),
                refit_s=fc.refit,
                quantile=float(fc.quantile),
                cache_dir=default_cache_dir(),
            )()
            runs.append((args.forecaster, KalePolicy(sizing, src, settings=settings)))
        for label, policy in runs:
            t0 = time.process_time()
            r = simulate(policy, sizing, values, warmup_steps=WARMUP, name=label)
            cpu = time.process_time() - t0
            m = r.metrics()
            row = {
                "trace": name,
                "policy": label,
                "set": changes,
                "x_minw": m["gpu_hours"] / lb,
                "x_opt": m["gpu_hours"] / opt,
                "opt_x_minw": opt / lb,
                "viol": m["slo_violation_rate"],
                "rescales_day": m["rescales_per_day"],
                "cum_delay": m["cumulative_delay_min"],
                "cpu_ms": 1000 * cpu / max(1, len(values) - WARMUP),
                "searches": getattr(policy, "searches", None),
            }
            print(
                f"{name:10s} {label:15s} x_minw {row['x_minw']:.3f} x_opt {row['x_opt']:.3f} "
                f"(opt {opt / lb:.3f}) viol {row['viol']:.3%} resc/d {row['rescales_day']:.1f} "
                f"cumdelay {row['cum_delay']:.0f} cpu {row['cpu_ms']:.2f} ms  {changes}",
                flush=True,
            )
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
