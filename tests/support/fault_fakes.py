"""Helpers of the fault suite: the controller tests' fakes, and a rig whose jobs misbehave.

The fault tests reuse :mod:`tests.support.controller_fakes` (fake clock, synthetic traffic,
job files, the fake API server); this module adds :class:`HostileRig`: a controller over
three jobs where one of them raises a chosen exception at a chosen point of the stack.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.factories import ModelCache, job_sizing
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import FileStatusSink, LogEventSink
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from tests.support.controller_fakes import (
    SYNC_MODEL,
    T0,
    FakeClock,
    FakeKubeApi,
    Objects,
    TraceMetrics,
    job_doc,
    write_job,
)

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


Target = Callable[[FakeKubeApi, str], dict[str, Any]]
"""Puts a job's workload into the fake and returns the job's ``spec.target``."""


class ClusterRig:
    """Controllers on the fake API server: jobs as custom resources, StatefulSet targets.

    Kafka is synthetic (a flat 100k/s, far more than one worker takes, so every job wants
    to grow at once); the API server is the fake one, through the official client, with
    injectable 409/429/5xx/slow/lost answers. Retries pause on a fake sleep.

    ``target`` puts another workload per job (a PyTorchJob, a Deployment…) and returns the
    job's target; the actuators are then the controller's own
    (:func:`autoscaler.controller.app.actuator_factory`, on this rig's client).
    """

    def __init__(
        self,
        api: FakeKubeApi | None,
        tmp: Path,
        *,
        kubeconfig: Path | None = None,
        jobs: int = 1,
        settings: ControllerSettings | None = None,
        store: Path | None = None,
        rate: Callable[[float], float] = lambda t: 100_000.0,
        clock: FakeClock | None = None,
        identity: str = "kale-0",
        target: Target | None = None,
        max_workers: int = 64,
    ) -> None:
        from autoscaler.actuators.statefulset import StatefulSetActuator
        from autoscaler.controller.app import actuator_factory
        from autoscaler.controller.cluster_jobs import ClusterJobs
        from autoscaler.controller.state import SqliteStateStore
        from kube.client import RetryPolicy, connect
        from kube.custom_resources import ElasticTrainingJobs
        from kube.events import EventRecorder

        self.api, self.tmp = api, tmp
        self.clock = clock or FakeClock(T0 + 86400)
        self.names = [f"job{i}" for i in range(jobs)]
        objs = Objects("ml")
        for name in self.names if api is not None else ():
            if api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", name) is None:
                if target is None:
                    api.put(objs.statefulset(f"{name}-worker", 1, gpus=1))
                    api.put(objs.statefulset(f"{name}-ps", 1))
                    spec = {"kind": "StatefulSet", "workers": f"{name}-worker", "ps": f"{name}-ps"}
                else:
                    spec = target(api, name)
                api.put(job_doc(name, target=spec, model="ctr-sync.json", max_workers=max_workers))
        self.pauses: list[float] = []
        if kubeconfig is None:
            assert api is not None
            kubeconfig = api.kubeconfig(tmp / f"kc-{identity}")
        self.kube = connect(
            kubeconfig=kubeconfig,
            retry=RetryPolicy(attempts=5, sleep=self.pauses.append),
            timeout_s=10.0,
        )
        crs = ElasticTrainingJobs(self.kube, namespaces=["ml"])
        self.crs = crs
        self.store_path = store
        self.controller = Controller(
            jobs_source=ClusterJobs(crs.list, models_dir=SYNC_MODEL.parent),
            meter_factory=lambda e: TraceMetrics(
                self.clock, rate, history_start=self.clock() - 4 * 3600
            ),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=(
                actuator_factory(SimpleNamespace(get=lambda: self.kube))
                if target is not None
                else lambda e: StatefulSetActuator(
                    self.kube,
                    namespace=e.namespace,
                    workers=e.job.spec.target.workers,
                    ps=e.job.spec.target.ps,
                )
            ),
            resource_manager=ResourceManager(10_000),
            clock=self.clock,
            status_sink=crs,
            event_sink=EventRecorder(self.kube, instance=identity, clock=self.clock),
            state_store=SqliteStateStore(store) if store is not None else None,
            settings=settings or ControllerSettings(identity=identity),
        )

    def tick(self, advance: float = 60.0) -> dict[str, Any]:
        # The fake API server records this with each request: writes get the fake time.
        self.kube.api_client.set_default_header("X-Test-Clock", f"{self.clock():.3f}")
        reports = {r.job: r for r in self.controller.tick()}
        self.clock.advance(advance)
        return reports

    def replicas(self, sts: str) -> int:
        assert self.api is not None
        return int(self.api.get("apps/v1", "StatefulSet", "ml", sts)["spec"]["replicas"])

    def changes(self, sts: str) -> list[int]:
        """The replica counts the StatefulSet was set to, in order (writes that changed it)."""
        assert self.api is not None
        out: list[int] = []
        for r in self.api.calls(contains=f"/statefulsets/{sts}/scale"):
            if r.method in ("PUT", "PATCH") and r.status in (0, 200) and r.body:
                n = r.body.get("spec", {}).get("replicas")
                if n is not None and (not out or out[-1] != n):
                    out.append(n)
        return out

    def status(self, name: str) -> dict:
        assert self.api is not None
        obj = self.api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", name) or {}
        return obj.get("status", {})

    def events(self, reason: str) -> list[dict]:
        assert self.api is not None
        return [e for e in self.api.list("v1", "Event", "ml") if e["reason"] == reason]

    def crash(self) -> None:
        """Stop without closing anything (what kill -9 leaves behind)."""
        self.controller.store.close()
        self.kube.close()

    def close(self) -> None:
        self.controller.close()
        self.kube.close()


def double_resizes(api: FakeKubeApi, rescale_s: float = 300.0) -> int:
    """Writes that changed a StatefulSet's replicas again within ``rescale_s`` (client time,
    from ``X-Test-Clock``) of its previous change: a resize started on top of one still
    settling — what the resize-in-progress marker and the planner's hold must prevent."""
    last: dict[str, tuple[int, float]] = {}
    doubles = 0
    for r in api.calls(contains="/scale"):
        if r.method not in ("PUT", "PATCH") or r.status not in (0, 200) or not r.body:
            continue
        sts = r.path.split("/statefulsets/")[1].split("/")[0]
        n = r.body.get("spec", {}).get("replicas")
        prev = last.get(sts)
        if n is None or (prev is not None and prev[0] == n):
            continue
        at = r.clock if r.clock is not None else r.time
        if prev is not None and at - prev[1] < rescale_s:
            doubles += 1
        last[sts] = (n, at)
    return doubles
