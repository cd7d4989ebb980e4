"""Benchmark of the controller's tick: 1,000 jobs planned per tick, forecasts cached.

Run from the repository root::

    .venv/bin/python -m benchmarks.controller                 # 1000 jobs, 20 measured ticks
    .venv/bin/python -m benchmarks.controller --jobs 200 --ticks 5 --check
    .venv/bin/python -m benchmarks.controller --jobs 10000 --ticks 5 --json-out tick.json
    .venv/bin/python -m benchmarks.controller --jobs 5000 --source directory   # job files

``--source directory`` writes one job file per job into a temporary directory and lists
them through the controller's :class:`DirectoryJobs` (local-mode admission, as
``kale controller`` does): the warm-up tick reads and validates every file, the measured
ticks find them unchanged (a ``stat`` each), and one extra tick after editing 1 % of the
files shows what a change costs.

What one measured tick does, for every job, with the real :class:`Controller`: read the size
(dry-run actuator), take a metric sample and the arrival history (synthetic, in memory: no
Kafka), reuse the cached forecast (``reforecast_s``: fitted and predicted once in the warm-up
tick, which is not measured), run Kale's planner, one GPU-quota round for all jobs, resize
where needed, build the status and the decision log, update the Prometheus metrics, and save
every job's state to SQLite. Status and events go nowhere (on a cluster they are I/O that
the API server's latency dominates). After the warm-up the heap is settled as the
controller's runner does after its first tick (:func:`settle_heap`). The target is ≤ 1 s per
tick on 2 cores; ``--check`` exits 1 when the median tick is slower. Wall time and the
process's CPU time are both reported: on a shared machine the CPU time is what the tick
costs, the wall time what it took.

The median is a steady tick, not an average one: every job starts in the warm-up tick, so
the planners follow their plans in step and search again together, on the same tick every
``replan_every_steps`` ticks (and whenever a forecast is renewed). The CPU time's mean, 90th
percentile and maximum show what those ticks cost.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.jobs import DirectoryJobs, StaticJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import ArrivalHistory, Sample
from autoscaler.controller.runner import settle_heap
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.state import SqliteStateStore
from autoscaler.job.loading import LoadedJob, parse_job
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.quota import ResourceManager
from autoscaler.policy.sizing import sizing_for
from benchmarks.paths import ROOT
from throughput.model import ThroughputModel

MODEL_PATH = ROOT / "examples" / "models" / "ctr-sync.json"
DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
INTERVAL = 60.0


def job_doc(i: int) -> dict:
    return {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": f"job-{i:04d}", "namespace": f"team-{i % 10}"},
        "spec": {
            "source": {
                "kafka": {
                    "bootstrapServers": ["kafka:9092"],
                    "topic": f"t{i}",
                    "consumerGroup": f"g{i}",
                }
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": 4,
                "minWorkers": 1,
                "maxWorkers": 64,
            },
            "slo": {"maxDelay": "10m"},
            "rescale": {"duration": "5m"},
            "throughput": {"model": str(MODEL_PATH)},
            "forecast": {"model": "seasonal_naive", "interval": "1m", "horizon": "60m"},
            "target": {"kind": "DryRun"},
            "priority": i % 3,
        },
    }


class DailyTraffic:
    """A job's synthetic topic: a daily curve with its own peak and phase; history in memory."""

    def __init__(self, clock, peak: float, phase: float, days: int) -> None:
        self.clock = clock
        self.peak, self.phase = peak, phase
        first = int((T0 - days * DAY) // INTERVAL)
        last = int((T0 + 2 * DAY) // INTERVAL)
        self.first = first
        steps = np.arange(first, last) * INTERVAL
        self.rates = self.rate(steps)

    def rate(self, t):
        x = ((np.asarray(t) + self.phase) % DAY) / DAY * 2 * math.pi
        return self.peak * (0.15 + 0.85 * (1 - np.cos(x)) / 2)

    def sample(self) -> Sample:
        now = self.clock()
        r = float(self.rate(now))
        return Sample(time=now, arrival_rate=r, consumption_rate=r, lag=0.0, oldest_age_s=0.0)

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        end = int(now // interval_s) - self.first
        start = max(0, end - int(history_s // interval_s))
        return ArrivalHistory((self.first + start) * interval_s, interval_s, self.rates[start:end])

    def close(self) -> None:
        pass


class PeriodicForecaster:
    """Seasonal naive with a known daily period, numpy only (the warm-up fits it once)."""

    def __init__(self) -> None:
        self.values: np.ndarray | None = None

    def fit(self, series):
        self.values = series.to_numpy()
        return self

    def predict(self, horizon: int, history=None):
        values = history.to_numpy() if history is not None else self.values
        period = 1440
        h = np.arange(1, horizon + 1)
        idx = len(values) - 1 + h - period * np.ceil(h / period).astype(int)
        mean = values[np.clip(idx, 0, len(values) - 1)]

        class F:
            pass

        f = F()
        f.mean, f.p10, f.p90 = mean, mean * 0.95, mean * 1.08
        f.quantile = lambda q: f.p90
        return f


def _p90(values: list[float]) -> float:
    """The 90th percentile (interpolated between the closest ranks; one value: itself)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def write_jobs(directory: Path, n_jobs: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n_jobs):
        path = directory / f"job-{i:05d}.yaml"
        path.write_text(yaml.safe_dump(job_doc(i), sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def run(
    n_jobs: int,
    ticks: int,
    history_days: int,
    real_forecaster: bool,
    source: str = "static",
    planner: str = "moves",
) -> dict:
    logging.disable(logging.WARNING)
    clock_t = [T0]

    def clock() -> float:
        return clock_t[0]

    model = ThroughputModel.load(MODEL_PATH)
    tmp = tempfile.mkdtemp(prefix="kale-bench-")
    loaded = []
    for i in range(n_jobs):
        job, problems = parse_job(job_doc(i))
        assert job is not None and not problems, problems
        loaded.append(LoadedJob(job, None))
    jobs_source: StaticJobs | DirectoryJobs = StaticJobs(loaded)
    paths: list[Path] = []
    if source == "directory":
        paths = write_jobs(Path(tmp) / "jobs", n_jobs)
        jobs_source = DirectoryJobs(Path(tmp) / "jobs")
    sizings: dict[str, object] = {}

    def sizing(entry):
        if "s" not in sizings:  # every job has the same model and bounds
            sizings["s"] = sizing_for(entry.loaded, model, interval_s=INTERVAL)
        return sizings["s"]

    rng = np.random.default_rng(7)
    peaks = rng.uniform(20_000, 200_000, n_jobs)
    phases = rng.uniform(0, DAY, n_jobs)
    index = {f"{j.job.metadata.namespace}/{j.name}": k for k, j in enumerate(loaded)}

    def meter(entry):
        k = index[entry.key]
        return DailyTraffic(clock, float(peaks[k]), float(phases[k]), history_days)

    if real_forecaster:
        from forecasting.registry import make_forecaster

        def forecaster(entry):
            return make_forecaster("seasonal_naive", period=1440)
    else:

        def forecaster(entry):
            return PeriodicForecaster()

    controller = Controller(
        jobs_source=jobs_source,
        meter_factory=meter,
        forecaster_factory=forecaster,
        actuator_factory=lambda e: DryRunActuator(Size(4, 1)),
        sizing_factory=sizing,
        resource_manager=ResourceManager(n_jobs * 16),
        clock=clock,
        state_store=SqliteStateStore(Path(tmp) / "state.sqlite"),
        settings=ControllerSettings(
            interval_s=INTERVAL,
            history_s=history_days * DAY,
            reforecast_s=6 * 3600.0,
            planner=KaleSettings(planner=planner),
        ),
    )
    t = time.perf_counter()
    controller.tick()  # warm-up: builds every job, fits and predicts every forecaster
    warmup = time.perf_counter() - t
    settle_heap()
    times, cpu, resizes, actions = [], [], 0, {}
    for _ in range(ticks):
        clock_t[0] += INTERVAL
        t, c = time.perf_counter(), time.process_time()
        reports = controller.tick()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        assert len(reports) == n_jobs
        resizes += sum(r.resized for r in reports)
        for r in reports:
            actions[r.action] = actions.get(r.action, 0) + 1
    out = {
        "jobs": n_jobs,
        "source": source,
        "ticks": ticks,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "warmup_s": round(warmup, 3),
        "p50_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
        "cpu_p50_s": round(statistics.median(cpu), 4),
        "cpu_mean_s": round(statistics.fmean(cpu), 4),
        "cpu_p90_s": round(_p90(cpu), 4),
        "cpu_max_s": round(max(cpu), 4),
        "per_job_ms": round(statistics.median(times) / n_jobs * 1000, 4),
        "resizes": resizes,
        "actions": actions,
        "forecaster": "seasonal_naive (registry)" if real_forecaster else "periodic (numpy)",
        "planner": planner,
    }
    if source == "directory":
        assert isinstance(jobs_source, DirectoryJobs)
        reads = jobs_source.reads
        edited = paths[::100] or paths[:1]  # 1 % of the files
        for path in edited:
            doc = job_doc(int(path.stem.split("-")[1]))
            doc["spec"]["priority"] = (doc["spec"]["priority"] + 1) % 3
            path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        clock_t[0] += INTERVAL
        t = time.perf_counter()
        controller.tick()
        out["files_read_in_measured_ticks"] = reads - n_jobs
        out["edited_files"] = len(edited)
        out["tick_after_edit_s"] = round(time.perf_counter() - t, 4)
        out["files_read_after_edit"] = jobs_source.reads - reads
    controller.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--history-days", type=int, default=2)
    ap.add_argument(
        "--real-forecaster",
        action="store_true",
        help="warm up with the registry's seasonal naive (slower warm-up)",
    )
    ap.add_argument(
        "--source",
        choices=["static", "directory"],
        default="static",
        help="jobs given in memory, or as files in a directory (DirectoryJobs)",
    )
    ap.add_argument(
        "--planner",
        choices=["moves", "dp"],
        default="moves",
        help="Kale's planner (KaleSettings.planner; default moves)",
    )
    ap.add_argument("--check", action="store_true", help="exit 1 if the median tick > 1 s")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the result here")
    args = ap.parse_args()
    res = run(
        args.jobs, args.ticks, args.history_days, args.real_forecaster, args.source, args.planner
    )
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(
            f"controller tick, {res['jobs']} jobs ({res['source']}), forecasts cached, "
            f"{res['cpus']} CPUs (load {res['load_avg_1m']}): p50 {res['p50_s']:.3f} s, "
            f"max {res['max_s']:.3f} s; CPU p50 {res['cpu_p50_s']:.3f} s, "
            f"mean {res['cpu_mean_s']:.3f} s, p90 {res['cpu_p90_s']:.3f} s, "
            f"max {res['cpu_max_s']:.3f} s; over {res['ticks']} ticks "
            f"({res['per_job_ms']:.3f} ms/job; warm-up {res['warmup_s']:.1f} s; "
            f"{res['resizes']} resizes; forecaster {res['forecaster']})"
        )
        print("actions:", ", ".join(f"{k} {v}" for k, v in sorted(res["actions"].items())))
        if "tick_after_edit_s" in res:
            print(
                f"directory: {res['files_read_in_measured_ticks']} files read in the measured "
                f"ticks; editing {res['edited_files']} files: next tick "
                f"{res['tick_after_edit_s']:.3f} s, {res['files_read_after_edit']} files read"
            )
    if args.check and res["p50_s"] > 1.0:
        print(f"FAIL: median tick {res['p50_s']:.3f} s > 1 s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
