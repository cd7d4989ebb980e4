"""Benchmark of the plan search (planner v2): microseconds per search, against the old one.

Records the calls Kale's planner makes to :func:`autoscaler.policy.horizon.search` while the
simulator runs it — fed the true future (the oracle) or the seasonal-naive forecast feed — on
generated traces of several seeds and peak/trough ratios and on the NASA HTTP trace, with
resizes of 0, 2 and 5 minutes and several ``maxPerHour`` budgets (the reactive floor comes
with the forecast feed); ``--keep`` of each run's searches, spread over the run, are timed.
Each is timed with the frozen copy of the search before it followed the plans' structure
(:mod:`benchmarks.planner_reference`, "old"), with the search ("new": the plan grid it keeps
per job, size and band already made, as for most of a job's decisions) and with the search
after forgetting its kept grids ("new cold"), interleaved input by input. Per input the
least of ``--repeat`` runs counts (its own cost, not its neighbours'), in the thread's CPU
time and in wall time. Prints µs per search (CPU p50, p90, mean; wall p50) over all inputs
and over the typical ones (resizes that take time, so the whole horizon is planned), the
speed-ups, and how many inputs old and new choose differently (moves, feasibility, violating
steps, candidates; cost and path to 1e-9 relative): that count must be 0. ``--json`` prints
the numbers as JSON instead.

Run from the repository root::

    python -m benchmarks.planner                 # about a minute, most of it recording
    python -m benchmarks.planner --days 1 --json

The NASA trace is read from ``<repo>/../shared/data`` (``--data DIR`` or ``$KALE_DATA_DIR``
names another folder); without it those scenarios are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.job.loading import load_job
from autoscaler.policy import horizon
from autoscaler.policy.forecasts import ForecastSource, TrueFuture
from autoscaler.policy.horizon import Plan, search
from autoscaler.policy.kale import KalePolicy
from autoscaler.policy.sizing import sizing_for
from autoscaler.policy.types import JobSizing
from autoscaler.sim.engine import simulate
from autoscaler.sim.forecasting import source_factory
from autoscaler.sim.runner import scale_to_peak
from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import load_trace
from benchmarks.planner_reference import search as reference_search
from throughput.model import ThroughputModel

ROOT = Path(__file__).resolve().parents[1]
NASA_FILE = "nasa_http_jul1995_1min.csv"
Search = Callable[..., Plan]


@dataclass(frozen=True)
class Scenario:
    """One simulated run whose searches are recorded."""

    trace: str
    """``seed S ratio R`` (a generated trace) or ``nasa``."""
    feed: str
    """``oracle`` (the true future) or ``seasonal_naive`` (the forecast feed)."""
    rescale_s: float
    max_per_hour: float | None


SCENARIOS = (
    Scenario("seed 1 ratio 20", "oracle", 300.0, 2.0),
    Scenario("seed 2 ratio 5", "seasonal_naive", 300.0, 2.0),
    Scenario("seed 3 ratio 2", "oracle", 120.0, 6.0),
    Scenario("seed 1 ratio 20", "seasonal_naive", 120.0, None),
    Scenario("seed 2 ratio 5", "oracle", 0.0, 2.0),
    Scenario("seed 3 ratio 2", "seasonal_naive", 0.0, 6.0),
    Scenario("nasa", "oracle", 300.0, 2.0),
    Scenario("nasa", "seasonal_naive", 300.0, 6.0),
    Scenario("nasa", "seasonal_naive", 120.0, 2.0),
    Scenario("nasa", "oracle", 0.0, None),
)


class RecordingPolicy(KalePolicy):
    """Kale's planner that keeps the arguments of every plan search it makes."""

    def __init__(self, *args: Any, calls: list[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = calls

    def _plan(self, *, sz: JobSizing, guess: bool, **kw: Any) -> Plan:
        if self.settings.planner == "moves":
            self.calls.append({"sizing": sz, "settings": self.plan_settings, **kw})
        return super()._plan(sz=sz, guess=guess, **kw)


def cold_search(**kwargs: Any) -> Plan:
    """The search with its kept plan grids forgotten first, as at a job's first decision
    (or a size and band it has not planned with lately)."""
    horizon._grid.cache_clear()
    return search(**kwargs)


def data_dir(flag: Path | None) -> Path:
    """The shared data folder: ``--data``, else ``$KALE_DATA_DIR``, else beside the checkout."""
    if flag is not None:
        return flag
    env = os.environ.get("KALE_DATA_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def trace_values(name: str, steps: int, data: Path) -> tuple[np.ndarray, Any] | None:
    """The first ``steps`` rates of a scenario's trace and its start (None: no NASA file)."""
    if name == "nasa":
        path = data / NASA_FILE
        if not path.exists():
            return None
        series = load_trace(path).series
    else:
        _, seed, _, ratio = name.split()
        days = steps * 60 / 86400 + 1
        series = generate_trace(days=days, interval_s=60, peak_trough=float(ratio), seed=int(seed))
    series = series.iloc[:steps]
    return series.to_numpy(dtype=float), series.index[0]


def record(
    scenarios: tuple[Scenario, ...], days: float, warmup_days: float, data: Path, keep: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Simulate each scenario; return ``keep`` of its search calls (evenly spread over the
    run: the planner searches at most steps, and timing each call twice takes longer than
    the simulation), and what was run."""
    loaded = load_job(ROOT / "examples" / "ctr-sync.yaml")
    model = ThroughputModel.load(loaded.throughput_model_path)
    warmup = round(warmup_days * 1440)
    steps = warmup + round(days * 1440)
    calls: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for sc in scenarios:
        got = trace_values(sc.trace, steps, data)
        if got is None:
            runs.append({**sc.__dict__, "skipped": f"no {NASA_FILE} in {data}"})
            continue
        sizing = sizing_for(loaded, model, rescale_s=sc.rescale_s, slo_s=600, interval_s=60)
        sizing = replace(sizing, max_resizes_per_hour=sc.max_per_hour)
        values, start = got
        values, _ = scale_to_peak(values, 0.8, sizing.peak_throughput)
        source: ForecastSource
        if sc.feed == "oracle":
            source = TrueFuture(values)
        else:
            source = source_factory(
                "seasonal_naive", start=start, interval_s=60, horizon_steps=60
            )()
        made: list[dict[str, Any]] = []
        policy = RecordingPolicy(sizing, source, name=sc.feed, calls=made)
        simulate(policy, sizing, values, warmup_steps=warmup)
        picked = np.unique(np.linspace(0, len(made) - 1, min(keep, len(made))).astype(int))
        calls.extend(made[i] for i in picked)
        runs.append({**sc.__dict__, "searches": len(made), "kept": len(picked)})
    return calls, runs


def same_choice(a: Plan, b: Plan) -> bool:
    """The two plans are the same choice (moves, flags, counts; cost and path to 1e-9)."""
    if (a.moves, a.feasible, a.violating_steps, a.candidates, len(a.path)) != (
        b.moves,
        b.feasible,
        b.violating_steps,
        b.candidates,
        len(b.path),
    ):
        return False
    close = [math.isclose(a.cost_gpu_s, b.cost_gpu_s, rel_tol=1e-9, abs_tol=1e-9)]
    close += [
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a.path, b.path, strict=True)
    ]
    return all(close)


def time_searches(
    calls: list[dict[str, Any]], impls: dict[str, Search], repeat: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Per call and implementation (interleaved input by input): the least CPU seconds and
    the least wall seconds of ``repeat`` runs; and whether the implementations choose
    differently. The thread's CPU time leaves out the time a loaded machine gives to others,
    which the wall time of the longer searches cannot escape even at its best."""
    cpu = {name: np.empty(len(calls)) for name in impls}
    wall = {name: np.empty(len(calls)) for name in impls}
    differ = np.zeros(len(calls), dtype=bool)
    for i, kw in enumerate(calls):
        plans = []
        for name, fn in impls.items():
            least_cpu = least_wall = math.inf
            for _ in range(repeat):
                c0, t0 = time.thread_time(), time.perf_counter()
                plan = fn(**kw)
                least_wall = min(least_wall, time.perf_counter() - t0)
                least_cpu = min(least_cpu, time.thread_time() - c0)
            cpu[name][i], wall[name][i] = least_cpu, least_wall
            plans.append(plan)
        differ[i] = not all(same_choice(plans[0], p) for p in plans[1:])
    return cpu, wall, differ


def percentiles(cpu_s: np.ndarray, wall_s: np.ndarray) -> dict[str, float]:
    """µs per search of one implementation over some inputs."""
    return {
        "p50": float(np.percentile(cpu_s, 50) * 1e6),
        "p90": float(np.percentile(cpu_s, 90) * 1e6),
        "mean": float(np.mean(cpu_s) * 1e6),
        "wall_p50": float(np.percentile(wall_s, 50) * 1e6),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=float, default=1.0, help="simulated days per scenario")
    ap.add_argument("--warmup-days", type=float, default=7.0, help="history before them")
    ap.add_argument("--keep", type=int, default=150, help="searches timed per scenario")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each input per search")
    ap.add_argument("--data", type=Path, default=None, help="shared data folder")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()

    calls, runs = record(
        SCENARIOS, args.days, args.warmup_days, data_dir(args.data), max(1, args.keep)
    )
    impls: dict[str, Search] = {"old": reference_search, "new": search, "new cold": cold_search}
    # The planner's typical search: a resize that takes time, so the whole horizon counts
    # (with free resizes only the first step is planned).
    typical = np.array([kw["sizing"].rescale_s > 0 for kw in calls], dtype=bool)
    groups = {"all": np.ones(len(calls), dtype=bool), "typical": typical}
    cpu, wall, differ = time_searches(calls, impls, args.repeat)
    plans = np.array([search(**kw).candidates for kw in calls])
    doc: dict[str, Any] = {"searches": len(calls), "repeat": args.repeat, "scenarios": runs}
    for group, mask in groups.items():
        if not mask.any():
            continue
        us = {name: percentiles(t[mask], wall[name][mask]) for name, t in cpu.items()}
        doc[group] = {
            "searches": int(mask.sum()),
            "candidates_p50": float(np.median(plans[mask])),
            "candidates_max": int(plans[mask].max()),
            "us_per_search": us,
            "speedup_p50": us["old"]["p50"] / us["new"]["p50"],
            "speedup_p90": us["old"]["p90"] / us["new"]["p90"],
            "speedup_p50_cold": us["old"]["p50"] / us["new cold"]["p50"],
            "differing_choices": int(differ[mask].sum()),
        }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for run in runs:
        print(
            f"{run['trace']:>16}  {run['feed']:>14}  rescale {run['rescale_s']:>5.0f}s  "
            f"maxPerHour {run['max_per_hour']!s:>4}  "
            + (
                f"{run['searches']} searches, {run['kept']} timed"
                if "kept" in run
                else run["skipped"]
            )
        )
    for group in groups:
        if group not in doc:
            continue
        g = doc[group]
        print(
            f"\n{group}: {g['searches']} searches, candidate plans p50 {g['candidates_p50']:.0f}, "
            f"max {g['candidates_max']}"
        )
        print(f"CPU µs per search (each input's best of {args.repeat}), and wall µs (p50):")
        print(f"{'search':>9} {'p50':>9} {'p90':>9} {'mean':>9} {'wall p50':>9}")
        for name, row in g["us_per_search"].items():
            print(
                f"{name:>9} {row['p50']:9.0f} {row['p90']:9.0f} {row['mean']:9.0f} "
                f"{row['wall_p50']:9.0f}"
            )
        print(
            f"speed-up: {g['speedup_p50']:.1f}× (p50), {g['speedup_p90']:.1f}× (p90), "
            f"{g['speedup_p50_cold']:.1f}× (p50, cold)"
        )
        print(f"inputs where the two choose differently: {g['differing_choices']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
