"""Wiring: from a :class:`ControllerConfig` to a running controller (what the CLI calls).

Builds the pieces the loop takes as arguments — the jobs source, Kafka metric sources with
their SQLite history, forecasters, actuators for each target kind, the GPU quota, status and
event sinks, the state store, metrics and the health server, and the leader elector — and
nothing else. The Kubernetes client is created only when something needs it (cluster mode,
leader election, or a job whose target lives in the cluster: :data:`CLUSTER_KINDS`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.actuators.base import Actuator, Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.factories import forecaster_factory
from autoscaler.controller.jobs import DirectoryJobs, JobEntry, JobsSource
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import KafkaMetricSource
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runner import Runner
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import FileStatusSink, LogEventSink, NullSink
from autoscaler.controller.state import SqliteStateStore
from autoscaler.controller.timeline import TimelineStore
from autoscaler.controller.workers import DaemonPool
from autoscaler.kafka.credentials import LocalSecrets
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.quota import ResourceManager
from common.errors import UserError
from common.metrics_server import Health, MetricsServer

log = logging.getLogger(__name__)

CLUSTER_KINDS = ("StatefulSet", "TFJob", "PyTorchJob", "Scale")
"""Target kinds that live in the cluster (their actuator needs the Kubernetes client)."""


class LazyKube:
    """Connects to the API server on first use (local mode may never need it)."""

    def __init__(self, *, kubeconfig: str | None, context: str | None) -> None:
        self.kubeconfig, self.context = kubeconfig, context
        self._kube: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._kube is None:
                from kube.client import connect

                try:
                    self._kube = connect(kubeconfig=self.kubeconfig, context=self.context)
                except Exception as exc:  # the kubernetes config loader's many error types
                    raise UserError(f"cannot configure the Kubernetes client: {exc}") from exc
            return self._kube

    def close(self) -> None:
        if self._kube is not None:
            self._kube.close()


def actuator_factory(
    kube: LazyKube, *, log_dir: Path | None = None, grace_s: float = 10.0, dry_run: bool = False
) -> Callable[[JobEntry], Actuator]:
    """An actuator for each job's ``spec.target.kind``.

    In a dry run a cluster target that cannot be reached (no kubeconfig) is simulated: a
    :class:`DryRunActuator` starting at ``minWorkers``, so a laptop can dry-run any job.
    """

    scales: list[Any] = []  # one discovery cache for every Scale target, made on first use

    def scale_subresources() -> Any:
        if not scales:
            from kube.scale import ScaleSubresources

            scales.append(ScaleSubresources(kube.get()))
        return scales[0]

    def make(entry: JobEntry) -> Actuator:
        target = entry.job.spec.target
        if dry_run and target.kind in CLUSTER_KINDS:
            try:
                kube.get()
            except UserError as exc:
                tr = entry.job.spec.training
                log.warning(
                    "%s: %s; dry run without the cluster, starting at minWorkers", entry.key, exc
                )
                return DryRunActuator(
                    Size(tr.min_workers, -(-tr.min_workers // tr.workers_per_ps)), label=entry.key
                )
        return _make(entry)

    def _make(entry: JobEntry) -> Actuator:
        target = entry.job.spec.target
        ns = entry.namespace
        if target.kind == "StatefulSet":
            from autoscaler.actuators.statefulset import StatefulSetActuator

            # Validated (jobrules, the CRD's CEL): a StatefulSet target names both sets.
            assert target.workers is not None and target.ps is not None
            return StatefulSetActuator(
                kube.get(), namespace=ns, workers=target.workers, ps=target.ps
            )
        if target.kind == "TFJob":
            from autoscaler.actuators.tfjob import TFJobActuator

            assert target.name is not None  # validated: a TFJob target names it
            return TFJobActuator(kube.get(), namespace=ns, name=target.name)
        if target.kind == "PyTorchJob":
            from autoscaler.actuators.pytorchjob import PyTorchJobActuator

            assert target.name is not None  # validated: a PyTorchJob target names it
            tr = entry.job.spec.training
            return PyTorchJobActuator(
                kube.get(),
                namespace=ns,
                name=target.name,
                min_workers=tr.min_workers,
                max_workers=tr.max_workers,
            )
        if target.kind == "Scale":
            from autoscaler.actuators.scale import ScaleActuator
            from kube.scale import ObjectRef

            ref, ps = target.scale_target_ref, target.ps_ref
            assert ref is not None  # validated: a Scale target names its workers' object
            return ScaleActuator(
                scale_subresources(),
                namespace=ns,
                workers=ObjectRef(ref.api_version, ref.kind, ref.name),
                ps=ObjectRef(ps.api_version, ps.kind, ps.name) if ps is not None else None,
            )
        if target.kind == "Local":
            from autoscaler.actuators.local import LocalActuator

            cwd = entry.loaded.path.parent if entry.loaded.path is not None else None
            return LocalActuator(
                target.command or [],
                job=entry.name,
                cwd=cwd,
                log_dir=log_dir,
                grace_s=grace_s,
                per_job=target.processes == "perJob",
            )
        return DryRunActuator(label=entry.key)

    return make


@dataclass(frozen=True)
class Deadlines:
    """How long a tick waits for each kind of slow work, from the configuration.

    A tick must end well inside its interval whatever one job's broker or API server does,
    so every wait is a fraction of the interval; work still running at a deadline goes on
    in the background and its job holds meanwhile.
    """

    observe_s: float
    """Measurements and target reads (``tick.observeDeadline``)."""
    act_s: float
    """Resize and status writes (``tick.writeDeadline``)."""
    backfill_s: float
    """One topic's backfill (off the tick): two intervals, at least 30 s."""

    @classmethod
    def of(cls, cfg: ControllerConfig) -> Deadlines:
        return cls(
            observe_s=cfg.observe_deadline,
            act_s=cfg.write_deadline,
            backfill_s=max(30.0, 2 * cfg.interval),
        )


def meter_factory(
    cfg: ControllerConfig,
    *,
    block_first: bool = False,
    clock: Callable[[], float] = time.time,
    background: DaemonPool | None = None,
) -> Callable[[JobEntry], Any]:
    history = Path(cfg.state_dir) / "history.sqlite"
    deadline = Deadlines.of(cfg).backfill_s

    def make(entry: JobEntry) -> KafkaMetricSource:
        kafka = entry.job.spec.source.kafka
        return KafkaMetricSource(
            bootstrap=",".join(kafka.bootstrap_servers),
            topic=kafka.topic,
            group=kafka.consumer_group,
            history_path=history,
            window_s=cfg.meter.window,
            timeout_s=cfg.meter.timeout,
            interval_s=float(entry.job.spec.forecast.interval),
            now=clock,
            block_first=block_first,
            background=background,
            backfill_deadline_s=deadline,
            security=entry.kafka_security,
        )

    return make


def identity(cfg: ControllerConfig) -> str:
    """This replica's name (see :meth:`LeaderElection.replica_identity`)."""
    return cfg.leader_election.replica_identity()


@dataclass
class App:
    controller: Controller
    runner: Runner
    server: MetricsServer | None
    kube: LazyKube
    background: DaemonPool | None = None
    informer: Any = None

    def run(self, *, max_ticks: int | None = None) -> int:
        if self.server is not None:
            self.server.start()
        try:
            return self.runner.run(max_ticks=max_ticks)
        finally:
            self.close()

    def close(self) -> None:
        if self.informer is not None:
            self.informer.stop()
        if self.background is not None:
            self.background.close()
        self.controller.close()
        if self.server is not None:
            self.server.stop()
        self.kube.close()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the loop after the current tick (and release the lease)."""

        def stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            self.runner.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


@dataclass(frozen=True)
class BuildOptions:
    """What a program embedding the controller (``kale demo``) sets instead of the defaults
    the configuration implies; :func:`build` wires them in, so nothing is patched afterwards."""

    planner: KaleSettings | None = None
    """Planner tunables (None: the planner's own defaults)."""
    forecaster_factory: Callable[[JobEntry], Any] | None = None
    """Forecasters per job (None: ``forecasting.model`` behind the fallback wrapper)."""
    wrap_actuator: Callable[[JobEntry, Actuator], Actuator] | None = None
    """Applied to each job's actuator once it is made (None: used as made)."""


def _timeline(state_dir: Path, cfg: ControllerConfig, dry_run: bool) -> TimelineStore:
    """The per-tick history the dashboard reads (``<stateDir>/timeline.sqlite``)."""
    timeline = TimelineStore(state_dir / "timeline.sqlite")
    timeline.set_meta(quota_gpus=cfg.quota.gpus, interval_s=cfg.interval, dry_run=dry_run)
    return timeline


def build(
    cfg: ControllerConfig,
    *,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
    once: bool = False,
    options: BuildOptions | None = None,
) -> App:
    """Everything :meth:`App.run` needs, from the configuration (and ``options``).

    ``once``: for a single tick (``--once``), backfills run inside it rather than in the
    background, so the one tick sees the history."""
    options = options or BuildOptions()
    dry_run = dry_run or cfg.dry_run
    kube = LazyKube(kubeconfig=cfg.kubeconfig, context=cfg.context)
    state_dir = Path(cfg.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    me = identity(cfg)
    jobs: JobsSource
    informer: Any = None
    status_sink: Any
    event_sink: Any
    if cfg.cluster_mode:
        from kube.configmaps import ConfigMaps
        from kube.custom_resources import ElasticTrainingJobs
        from kube.events import EventRecorder
        from kube.job_watch import JobInformer
        from kube.secrets import Secrets

        crs = ElasticTrainingJobs(kube.get(), namespaces=cfg.jobs.namespaces or [])
        # A watch keeps the jobs current; the tick reads its cache instead of listing.
        informer = JobInformer(kube.get(), namespaces=cfg.jobs.namespaces or []).start()
        jobs = ClusterJobs(
            informer.list,
            models_dir=cfg.jobs.models_dir or ".",
            policy=cfg.admission_policy(),
            config_maps=ConfigMaps(kube.get()).read,
            secrets=Secrets(kube.get()).read,
        )
        status_sink, event_sink = crs, EventRecorder(kube.get(), instance=me, clock=clock)
    else:
        assert cfg.jobs.directory is not None
        jobs = DirectoryJobs(
            cfg.jobs.directory,
            policy=cfg.admission_policy(),
            secrets=LocalSecrets(cfg.secrets_dir).read,
        )
        status_sink, event_sink = FileStatusSink(state_dir / "status"), LogEventSink()
    if dry_run:
        status_sink, event_sink = NullSink(), LogEventSink()
    metrics = ControllerMetrics()
    deadlines = Deadlines.of(cfg)
    background = None if once else DaemonPool(cfg.tick.backfill_threads, name="kale-backfill")
    actuators = actuator_factory(kube, log_dir=state_dir / "workers", dry_run=dry_run)
    wrap = options.wrap_actuator
    controller = Controller(
        jobs_source=jobs,
        meter_factory=meter_factory(cfg, clock=clock, background=background),
        forecaster_factory=options.forecaster_factory or forecaster_factory(cfg.forecasting.model),
        actuator_factory=actuators if wrap is None else (lambda e: wrap(e, actuators(e))),
        resource_manager=ResourceManager(cfg.quota.gpus) if cfg.quota.gpus is not None else None,
        clock=clock,
        status_sink=status_sink,
        event_sink=event_sink,
        metrics=metrics,
        state_store=SqliteStateStore(state_dir / "controller.sqlite"),
        timeline=_timeline(state_dir, cfg, dry_run),
        settings=ControllerSettings(
            interval_s=cfg.interval,
            history_s=cfg.forecasting.history,
            reforecast_s=cfg.forecasting.reforecast,
            dry_run=dry_run,
            fit_threads=cfg.forecasting.fit_threads,
            observe_threads=cfg.meter.threads,
            observe_deadline_s=deadlines.observe_s,
            act_threads=cfg.tick.write_threads,
            act_deadline_s=deadlines.act_s,
            identity=me,
            shards=cfg.shards,
            forecast_model=cfg.forecasting.model,
            planner=options.planner,
        ),
    )
    le = cfg.leader_election
    elector: Any = None
    if le.enabled and cfg.shards > 1:
        elector = le.shard_elector(
            kube.get(),
            identity=me,
            clock=clock,
            shards=cfg.shards,
            max_held=cfg.max_shards_per_replica,
        )
        controller.ownership = elector
    elif le.enabled:
        elector = le.elector(kube.get(), identity=me, clock=clock)
    health = Health(stale_after_s=max(3 * cfg.interval, 60.0), clock=clock)
    server = None
    if cfg.metrics.port:
        try:
            server = MetricsServer(
                metrics, health, address=cfg.metrics.address, port=cfg.metrics.port
            )
        except OSError as exc:
            raise UserError(
                f"metrics.port: cannot listen on {cfg.metrics.address}:{cfg.metrics.port}: {exc}"
            ) from exc
    runner = Runner(
        controller,
        interval_s=cfg.interval,
        elector=elector,
        health=health,
        clock=clock,
        settle=True,
    )
    return App(controller, runner, server, kube, background, informer)
