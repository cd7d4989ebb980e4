"""The live demo's numbers: one job, one generated trace, and how both are compressed.

Why this module exists: the demo replays days of traffic in minutes, so every duration the
controller sees (interval, rescale, SLO, horizon, refit, planner windows, meter window) must
be divided by the same ``speedup``, and the traffic must be thinned to what one Python
producer and a few worker processes can carry on two cores, with the throughput model scaled
by the same factor so that sizes stay those of the real job. Doing that arithmetic in one
pure place keeps the live run, the simulator run it is compared with, and the dashboard's
display units consistent, and lets tests check it without starting anything.

Two views of the same job:

* **trace time** (the real job): 10-minute decisions, 10-minute rescales, a 30-minute SLO,
  rates in samples/s, the example CTR job's fitted model. The simulator runs this.
* **wall time** (what runs): every duration ÷ ``speedup``; one record on Kafka stands for
  ``speedup / records_scale`` samples, so a rate of r samples/s is ``r × records_scale``
  records/s, and the throughput model is scaled by ``records_scale`` too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kale.demo import examples

DEFAULT_MODEL = examples.MODEL
DAY_S = 86400.0


@dataclass(frozen=True)
class DemoPlan:
    """Everything that fixes the demo's run; defaults finish in about 5 minutes on 2 cores."""

    minutes: float = 4.5
    """Wall minutes of live replay."""
    speedup: float = 600.0
    """Trace seconds per wall second (600: a day in 144 s)."""
    interval_s: float = 600.0
    """Controller interval in trace seconds (one tick per ``interval_s / speedup`` wall s)."""
    rescale_s: float = 600.0
    """Rescale duration (trace s): the workers honour it as downtime on every resize (at the
    default speedup it is one wall second, which also covers starting a dozen worker
    processes on two cores)."""
    slo_s: float = 1800.0
    """SLO on the oldest unconsumed sample (trace s)."""
    horizon_s: float = 7200.0
    """Forecast horizon (trace s)."""
    history_days: float = 7.0
    """Days of trace before the live part: the forecaster's history, the simulator's warm-up."""
    max_workers: int = 16
    """The job's worker range is 1..max_workers (so a laptop runs at most this many workers)."""
    peak_fraction: float = 0.6
    """The trace's peak is this share of f(max_workers)."""
    peak_trough: float = 20.0
    """Ratio of the daily peak to the night trough."""
    records_at_peak: float = 1200.0
    """Records/s on Kafka at the trace's peak (the replay thins the traffic to this)."""
    partitions: int = 16
    """Partitions of the topic (workers split them round robin)."""
    quota_gpus: int = 24
    """The cluster's GPU quota (shown on the dashboard)."""
    forecaster: str = "seasonal_naive"
    """Forecasting model of the live controller and the simulated Kale."""
    seed: int = 1
    model_path: Path = DEFAULT_MODEL
    """The fitted throughput model of the example CTR job."""

    def __post_init__(self) -> None:
        checks = [
            (self.minutes > 0, "--minutes must be positive"),
            (self.speedup > 0, "--speedup must be positive"),
            (
                self.interval_s / self.speedup >= 0.25,
                f"--speedup {self.speedup:g} would tick every "
                f"{self.interval_s / self.speedup:.3g}s; keep it ≤ {self.interval_s / 0.25:g}",
            ),
            (self.rescale_s <= self.horizon_s, "the rescale must fit in the horizon"),
            (self.max_workers >= 1 and self.partitions >= 1, "workers and partitions ≥ 1"),
            (self.history_days >= 1, "at least one day of history"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    # -- durations ------------------------------------------------------------------------
    @property
    def tick_s(self) -> float:
        """Wall seconds between controller ticks."""
        return self.interval_s / self.speedup

    def wall(self, trace_s: float) -> float:
        """A trace duration in wall seconds."""
        return trace_s / self.speedup

    @property
    def live_trace_s(self) -> float:
        return self.minutes * 60.0 * self.speedup

    @property
    def live_days(self) -> float:
        return self.live_trace_s / DAY_S

    @property
    def horizon_steps(self) -> int:
        return max(1, round(self.horizon_s / self.interval_s))

    @property
    def warmup_steps(self) -> int:
        """Controller intervals of history before the live part."""
        return round(self.history_days * DAY_S / self.interval_s)


def load_model(plan: DemoPlan) -> Any:
    from throughput.model import ThroughputModel

    return ThroughputModel.load(examples.from_checkout(plan.model_path))


def scaled_model(model: Any, factor: float) -> Any:
    """``model`` with its throughput multiplied by ``factor`` (every family is M or w over a
    sum of θ terms, so dividing θ by the factor scales f by it)."""
    from throughput.model import ThroughputModel

    return ThroughputModel(
        family=model.family,
        mode=model.mode,
        theta=tuple(t / factor for t in model.theta),
        global_batch=model.global_batch,
        ratio=model.ratio,
        min_workers=model.min_workers,
        max_workers=model.max_workers,
    )


def job_doc(
    plan: DemoPlan,
    *,
    wall: bool,
    bootstrap: str = "127.0.0.1:9092",
    topic: str = "clicks",
    group: str = "ctr-trainer",
    model: str | Path = "",
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The demo job, in trace time (``wall=False``: what the simulator runs) or compressed
    (``wall=True``: what the controller runs, with a Local target running ``command``)."""
    k = plan.speedup if wall else 1.0
    refit = DAY_S / k
    doc: dict[str, Any] = {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {
            "name": "ctr-model",
            "namespace": "demo",
            "annotations": {"kale.dev/demo-speedup": f"{plan.speedup:g}"},
        },
        "spec": {
            "source": {
                "kafka": {"bootstrapServers": [bootstrap], "topic": topic, "consumerGroup": group}
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": 4,
                "minWorkers": 1,
                "maxWorkers": plan.max_workers,
                "gpusPerWorker": 1,
            },
            "slo": {"maxDelay": plan.slo_s / k},
            "rescale": {"duration": plan.rescale_s / k},
            "throughput": {"model": str(model or plan.model_path)},
            "forecast": {
                "model": plan.forecaster,
                "interval": plan.interval_s / k,
                "horizon": plan.horizon_s / k,
                "refit": refit,
            },
            "target": ({"kind": "Local", "command": command or []} if wall else {"kind": "DryRun"}),
        },
    }
    return doc


def trace(plan: DemoPlan, peak_throughput: float) -> pd.Series:
    """The generated 1-minute trace (history days + live days + a margin), scaled so its peak
    is ``peak_fraction`` × ``peak_throughput`` samples/s."""
    from autoscaler.sim.tracegen import generate_trace

    days = plan.history_days + math.ceil(plan.live_days + 0.5)
    series = generate_trace(days=days, interval_s=60, peak_trough=plan.peak_trough, seed=plan.seed)
    return series * (plan.peak_fraction * peak_throughput / float(series.max()))


def records_scale(plan: DemoPlan, series: pd.Series) -> float:
    """Records/s per sample/s: the live part's peak becomes ``records_at_peak`` records/s."""
    live = series[series.index >= trace_origin(plan, series)]
    top = float(live.max()) if len(live) else float(series.max())
    return plan.records_at_peak / top if top > 0 else 1.0


def trace_origin(plan: DemoPlan, series: pd.Series) -> pd.Timestamp:
    """Where the live part starts: after the history days, on the controller's grid."""
    return series.index[0] + pd.Timedelta(seconds=plan.warmup_steps * plan.interval_s)


def on_interval(plan: DemoPlan, series: pd.Series) -> np.ndarray:
    """The trace as the simulator sees it: mean rate per controller interval."""
    from autoscaler.sim.runner import resample

    return resample(series.to_numpy(dtype=float), 60.0, plan.interval_s)
