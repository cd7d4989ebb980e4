"""Helpers of the fault suite: the controller tests' fakes, and a rig whose jobs misbehave.

The fault tests reuse :mod:`controller_fakes` (fake clock, synthetic traffic, job files, the
fake API server); this module puts its folder on ``sys.path`` so the suite runs from any
working directory, and adds :class:`HostileRig`: a controller over three jobs where one of
them raises a chosen exception at a chosen point of the stack.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests" / "controller"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from controller_fakes import (  # noqa: E402
    SYNC_MODEL,
    T0,
    FakeClock,
    FakeKubeApi,
    Objects,
    TraceMetrics,
    job_doc,
    write_job,
)

from autoscaler.actuators.base import Size  # noqa: E402
from autoscaler.actuators.dryrun import DryRunActuator  # noqa: E402
from autoscaler.controller.factories import ModelCache, job_sizing  # noqa: E402
from autoscaler.controller.jobs import DirectoryJobs  # noqa: E402
from autoscaler.controller.loop import Controller, ControllerSettings  # noqa: E402
from autoscaler.controller.sinks import FileStatusSink, LogEventSink  # noqa: E402
from autoscaler.resources import ResourceManager  # noqa: E402
from forecasting.registry import make_forecaster  # noqa: E402

__all__ = [
    "SYNC_MODEL",
    "T0",
    "FakeClock",
    "FakeKubeApi",
    "HostileRig",
    "Objects",
    "TraceMetrics",
    "job_doc",
    "write_job",
]

HOSTILE = "ml/a"
PEACEFUL = ("ml/b", "ml/c")


def flat(t: float) -> float:
    return 60_000.0


class Raiser:
    """Raises ``self.exc`` (when set) where it is called; the rig points it at one job."""

    def __init__(self) -> None:
        self.exc: BaseException | None = None
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.exc is not None:
            raise self.exc


class HostileTarget(DryRunActuator):
    def __init__(self, size: Size, on_current: Raiser, on_apply: Raiser) -> None:
        super().__init__(size)
        self.on_current, self.on_apply = on_current, on_apply

    def current(self) -> Size:
        self.on_current()
        return super().current()

    def apply(self, size: Size) -> Size:
        self.on_apply()
        return super().apply(size)


class HostileMetrics(TraceMetrics):
    def __init__(self, *args: Any, on_sample: Raiser, on_arrivals: Raiser, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.on_sample, self.on_arrivals = on_sample, on_arrivals

    def sample(self):  # type: ignore[no-untyped-def]
        self.on_sample()
        return super().sample()

    def arrivals(self, now, interval_s, history_s):  # type: ignore[no-untyped-def]
        self.on_arrivals()
        return super().arrivals(now, interval_s, history_s)


class HostileSink(FileStatusSink):
    def __init__(self, directory: Path, on_write: Raiser) -> None:
        super().__init__(directory)
        self.on_write = on_write

    def write_status(self, namespace: str, name: str, status: dict) -> None:
        if f"{namespace}/{name}" == HOSTILE:
            self.on_write()
        super().write_status(namespace, name, status)


class HostileEvents(LogEventSink):
    def __init__(self, on_emit: Raiser) -> None:
        super().__init__()
        self.on_emit = on_emit

    def emit(self, *, namespace: str, name: str, **kw: Any) -> bool:
        if f"{namespace}/{name}" == HOSTILE:
            self.on_emit()
        return super().emit(namespace=namespace, name=name, **kw)


class HostileRig:
    """Three jobs (``ml/a`` hostile, ``ml/b`` and ``ml/c`` peaceful) under one controller.

    ``points[name]`` is the :class:`Raiser` behind each injection point; only calls made for
    ``ml/a`` reach it.
    """

    POINTS = (
        "sizing",
        "meter_factory",
        "actuator_factory",
        "current",
        "sample",
        "arrivals",
        "decide",
        "apply",
        "status",
        "event",
    )

    def __init__(
        self,
        tmp: Path,
        *,
        settings: ControllerSettings | None = None,
        rate: Callable[[float], float] = flat,
    ) -> None:
        self.dir = tmp / "jobs"
        for name in ("a", "b", "c"):
            write_job(self.dir, job_doc(name))
        self.points = {p: Raiser() for p in self.POINTS}
        self.clock = FakeClock(T0 + 86400)
        self.rate = rate
        self.targets: dict[str, DryRunActuator] = {}
        self.events = HostileEvents(self.points["event"])
        self.status = HostileSink(tmp / "status", self.points["status"])
        models = ModelCache()
        nobody = Raiser()

        def point(entry: Any, name: str) -> Raiser:
            return self.points[name] if entry.key == HOSTILE else nobody

        def sizing(entry: Any) -> Any:
            point(entry, "sizing")()
            return job_sizing(entry.loaded, models)

        def meter(entry: Any) -> Any:
            point(entry, "meter_factory")()
            return HostileMetrics(
                self.clock,
                self.rate,
                history_start=self.clock() - 4 * 3600,  # short: cheap ticks
                on_sample=point(entry, "sample"),
                on_arrivals=point(entry, "arrivals"),
            )

        def actuator(entry: Any) -> Any:
            point(entry, "actuator_factory")()
            t = self.targets[entry.key] = HostileTarget(
                Size(1, 1), point(entry, "current"), point(entry, "apply")
            )
            return t

        self.controller = Controller(
            jobs_source=DirectoryJobs(self.dir),
            meter_factory=meter,
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=actuator,
            sizing_factory=sizing,
            resource_manager=ResourceManager(64),
            clock=self.clock,
            status_sink=self.status,
            event_sink=self.events,
            settings=settings or ControllerSettings(identity="test"),
        )
        self._decide_hooked: Any = None

    def hook_decide(self) -> None:
        """Route ``ml/a``'s planner through the ``decide`` raiser (after the job is built)."""
        rt = self.controller.runtimes.get(HOSTILE)
        if rt is None or rt.policy is self._decide_hooked:
            return
        real, raiser = rt.policy.decide, self.points["decide"]

        def decide(obs, state):  # type: ignore[no-untyped-def]
            raiser()
            return real(obs, state)

        rt.policy.decide = decide  # type: ignore[method-assign]
        self._decide_hooked = rt.policy

    def tick(self) -> dict[str, Any]:
        self.hook_decide()
        reports = {r.job: r for r in self.controller.tick()}
        self.clock.advance(60)
        return reports

    def status_of(self, key: str) -> dict:
        ns, name = key.split("/")
        path = self.status.path(ns, name)
        return json.loads(path.read_text()) if path.exists() else {}

    def ready(self, key: str) -> dict:
        conds = {c["type"]: c for c in self.status_of(key).get("conditions", [])}
        return conds.get("Ready", {})

    def job_errors(self, key: str = HOSTILE) -> float:
        ns, name = key.split("/")
        total = 0.0
        for metric in self.controller.metrics.job_errors.collect():
            for s in metric.samples:
                if (
                    s.name.endswith("_total")
                    and s.labels.get("namespace") == ns
                    and s.labels.get("etj") == name
                ):
                    total += s.value
        return total
