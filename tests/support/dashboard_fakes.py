"""Helpers of the dashboard tests: a state directory made by real controller ticks.

The controller runs with a fake clock, a metric source fed from a rate function (a fluid
backlog that grows when the size is too small) and dry-run targets: no Kafka, no processes,
no sleeping. It writes what ``kale controller`` writes in local mode — the timeline, status
files, the state store — which is all the dashboard reads.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import ArrivalHistory, Sample
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import FileStatusSink, LogEventSink
from autoscaler.controller.state import SqliteStateStore
from autoscaler.controller.timeline import TimelineStore
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from throughput.model import ThroughputModel

ROOT = Path(__file__).resolve().parents[2]
MODEL_PATH = ROOT / "examples" / "models" / "ctr-sync.json"
MODEL = ThroughputModel.load(MODEL_PATH)
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PERIOD = 240 * 60.0  # a compressed four-hour "day"
TICKS = 150
QUOTA = 48


def wave(t: float) -> float:
    return 20_000 + 140_000 * (1 - math.cos((t % PERIOD) / PERIOD * 2 * math.pi)) / 2


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Traffic:
    """The job's topic: rates from ``wave``, a fluid backlog served at f(current size)."""

    def __init__(self, clock: Clock, targets: dict[str, DryRunActuator], key: str) -> None:
        self.clock, self.targets, self.key = clock, targets, key
        self.backlog, self.last = 0.0, None

    def sample(self) -> Sample:
        now = self.clock()
        rate = wave(now)
        w = self.targets[self.key].size.workers
        cap = MODEL.throughput(w, -(-w // 4), warn=False) if w else 0.0
        if self.last is not None:
            self.backlog = max(0.0, self.backlog + (rate - cap) * (now - self.last))
        self.last = now
        return Sample(
            time=now,
            arrival_rate=rate,
            consumption_rate=min(rate, cap),
            lag=self.backlog,
            oldest_age_s=self.backlog / rate,
            partitions=64,
        )

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        first = math.ceil((T0 - 2 * PERIOD) / interval_s)
        steps = np.arange(first, int(now // interval_s))
        return ArrivalHistory(
            first * interval_s, interval_s, np.array([wave(k * interval_s) for k in steps])
        )

    def close(self) -> None:
        pass


def job_doc(name: str) -> dict:
    return {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "source": {
                "kafka": {
                    "bootstrapServers": ["127.0.0.1:9092"],
                    "topic": f"{name}-t",
                    "consumerGroup": f"{name}-g",
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
        },
    }


def build_state(state: Path, *, ticks: int = TICKS, jobs: tuple[str, ...] = ("ctr", "ads")) -> Path:
    """Run ``ticks`` controller ticks (one a minute) over ``jobs``; returns ``state``."""
    jobs_dir = state / "jobs"
    jobs_dir.mkdir(parents=True)
    for name in jobs:
        (jobs_dir / f"{name}.yaml").write_text(yaml.safe_dump(job_doc(name)), encoding="utf-8")
    clock = Clock(T0)
    targets: dict[str, DryRunActuator] = {}

    def actuator(entry):
        targets[entry.key] = DryRunActuator(Size(2, 1), label=entry.key)
        return targets[entry.key]

    timeline = TimelineStore(state / "timeline.sqlite")
    timeline.set_meta(quota_gpus=QUOTA, interval_s=60.0)
    controller = Controller(
        jobs_source=DirectoryJobs(jobs_dir),
        meter_factory=lambda e: Traffic(clock, targets, e.key),
        forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=240),
        actuator_factory=actuator,
        resource_manager=ResourceManager(QUOTA),
        clock=clock,
        status_sink=FileStatusSink(state / "status"),
        event_sink=LogEventSink(),
        state_store=SqliteStateStore(state / "controller.sqlite"),
        settings=ControllerSettings(identity="test"),
        timeline=timeline,
    )
    try:
        for _ in range(ticks):
            controller.tick()
            clock.t += 60.0
    finally:
        controller.close()
    return state
