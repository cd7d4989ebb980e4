"""Shared helpers of the controller tests: a fake clock, a synthetic metric source, job files.

The metric source is the controller's own ``MetricSource`` interface fed from a rate
function (no Kafka); Kafka itself is exercised in the end-to-end test. The fake API server
is re-exported from here: most controller tests need both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from autoscaler.controller.metering import ArrivalHistory, Sample
from common.errors import MetricUnavailable
from tests.support.kube_api import FakeKubeApi, Objects

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["FakeKubeApi", "Objects"]
SYNC_MODEL = ROOT / "examples" / "models" / "ctr-sync.json"
DAY = 86400.0
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a whole number of days since the epoch


class FakeClock:
    """Epoch seconds that move only when told to."""

    def __init__(self, start: float = T0) -> None:
        self.t = float(start)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def daily_rate(t: float, low: float = 20_000.0, high: float = 160_000.0) -> float:
    """A smooth daily curve: low at 04:00, high at 16:00 (UTC)."""
    phase = ((t % DAY) / DAY - 4 / 24) * 2 * math.pi
    return low + (high - low) * (1 - math.cos(phase)) / 2


class TraceMetrics:
    """A job's traffic from ``rate(t)``: per-interval history, and a fluid backlog.

    The backlog grows by (arrival − capacity) between samples, where capacity is
    ``capacity()`` (e.g. the throughput of the size the fake target holds); ``down = True``
    makes ``sample`` raise like an unreachable broker.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        rate: Callable[[float], float],
        *,
        interval_s: float = 60.0,
        history_start: float | None = None,
        capacity: Callable[[], float] | None = None,
    ) -> None:
        self.clock = clock
        self.rate = rate
        self.interval_s = interval_s
        self.history_start = history_start if history_start is not None else clock() - 2 * DAY
        self.capacity = capacity
        self.down = False
        self.backlog = 0.0
        self.last: float | None = None
        self.samples = 0
        self.closed = False

    def sample(self) -> Sample:
        if self.down:
            raise MetricUnavailable("broker 127.0.0.1:9 unreachable (fake)")
        now = self.clock()
        arrival = self.rate(now)
        consumed = arrival
        if self.capacity is not None and self.last is not None:
            cap = self.capacity()
            dt = now - self.last
            self.backlog = max(0.0, self.backlog + (arrival - cap) * dt)
            consumed = min(cap, arrival + self.backlog / max(dt, 1e-9))
        self.last = now
        self.samples += 1
        age = self.backlog / arrival if arrival > 0 else 0.0
        return Sample(
            time=now,
            arrival_rate=arrival,
            consumption_rate=consumed,
            lag=self.backlog,
            oldest_age_s=age,
            partitions=64,
        )

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        first = max(
            math.ceil(self.history_start / interval_s), math.ceil((now - history_s) / interval_s)
        )
        end = int(now // interval_s)
        steps = np.arange(first, end)
        rates = np.array([self.rate(k * interval_s) for k in steps], dtype=float)
        return ArrivalHistory(first * interval_s, interval_s, rates)

    def close(self) -> None:
        self.closed = True


def job_doc(
    name: str = "ctr",
    *,
    namespace: str = "ml",
    target: dict | None = None,
    min_workers: int = 1,
    max_workers: int = 64,
    priority: int = 0,
    model: str | Path = SYNC_MODEL,
    interval: str = "1m",
    horizon: str = "60m",
    rescale: str = "5m",
    slo: str = "10m",
    forecast_model: str = "seasonal_naive",
    gpus_per_worker: int = 1,
) -> dict:
    return {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {
                "kafka": {
                    "bootstrapServers": ["kafka.kafka.svc:9092"],  # allowed in cluster mode
                    "topic": f"{name}-t",
                    "consumerGroup": f"{name}-g",
                }
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": 4,
                "minWorkers": min_workers,
                "maxWorkers": max_workers,
                "gpusPerWorker": gpus_per_worker,
            },
            "slo": {"maxDelay": slo},
            "rescale": {"duration": rescale},
            "throughput": {"model": str(model)},
            "forecast": {"model": forecast_model, "interval": interval, "horizon": horizon},
            "target": target or {"kind": "DryRun"},
            "priority": priority,
        },
    }


def write_job(directory: Path, doc: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path
