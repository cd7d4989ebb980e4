"""Wiring and threads: from a :class:`SchedulerConfig` to a running ``kale scheduler``.

Threads: one reflector per watched resource (pods, nodes, and Events on Nodes for the fault
history) puts events in an inbox; the
lease thread renews leadership; the scheduling thread — the only one touching the
scheduler's state — drains the inbox, applies the events and, while leading and once both
first lists are in, schedules every due pod. A standby keeps watching (a hot standby: it
takes over with a complete view). The scheduler never acts before both lists are in: a
view without the bound pods would give away GPUs that are taken.

``--once`` (:meth:`SchedulerApp.run_once`) does the same up to one scheduling pass, then
closes; ``--dry-run`` builds the same scheduler with nothing written — not even the Lease,
so a dry run beside the running scheduler never takes its place.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.config import SchedulerConfig
from scheduler.core import Outcome, Scheduler, SchedulerSettings
from scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)


@dataclass
class SchedulerApp:
    """A scheduler with its watches, lease, event recorder and metrics server."""

    scheduler: Scheduler
    kube: Any
    reflectors: list[Any]
    recorder: Any
    elector: Any = None
    server: Any = None
    health: Any = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    inbox: queue.Queue[tuple[str, str, Any]] = field(default_factory=queue.Queue)
    leading: bool = False
    max_wait_s: float = 1.0
    _threads: list[threading.Thread] = field(default_factory=list)

    def sink(self, resource: str) -> Callable[[str, Any], None]:
        def put(kind: str, payload: Any) -> None:
            self.inbox.put((resource, kind, payload))

        return put

    def _drain(self, timeout: float) -> int:
        handled = 0
        try:
            item = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return 0
        while True:
            resource, kind, payload = item
            if kind == "SYNC":
                self.scheduler.metrics.relists.labels(resource=resource).inc()
            if kind == "WAKE":  # stop() wakes the loop
                pass
            elif resource == "pods":
                self.scheduler.on_pod(kind, payload)
            elif resource == "events":
                self.scheduler.on_event(kind, payload)
            else:
                self.scheduler.on_node(kind, payload)
            handled += 1
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return handled

    def _renew(self) -> None:
        while not self.stop_event.is_set():
            was = self.leading
            self.leading = self.elector.try_acquire_or_renew()
            if self.elector.last_error:
                self.scheduler.metrics.errors.labels(kind="lease").inc()
            self.scheduler.metrics.leader.set(1 if self.leading else 0)
            if self.leading != was:
                role = "the leader" if self.leading else "a standby"
                log.info("%s is now %s", self.elector.identity, role)
            if self.stop_event.wait(self.elector.retry_period_s):
                return

    def is_leader(self) -> bool:
        return self.elector is None or (self.leading and self.elector.is_leader())

    def synced(self) -> bool:
        """Both first lists in (pods, nodes); fault Events are extra and never hold it up."""
        return all(r.synced.is_set() for r in self.reflectors if r.resource != "events")

    def run(self, *, until: Callable[[], bool] | None = None) -> None:
        """Watch and schedule until :meth:`stop` (or ``until()`` turns true)."""
        from kube.informer import start

        self._threads = [start(r) for r in self.reflectors]
        if self.elector is not None:
            renewer = threading.Thread(target=self._renew, name="kale-lease", daemon=True)
            renewer.start()
            self._threads.append(renewer)
        else:
            self.scheduler.metrics.leader.set(1)
        if self.server is not None:
            self.server.start()
        wait = 0.0
        try:
            while not self.stop_event.is_set() and not (until is not None and until()):
                self._drain(wait)
                if self.health is not None and self.synced():
                    self.health.beat()
                if self.synced() and self.is_leader():
                    self.scheduler.schedule()
                    due = self.scheduler.next_wakeup()
                    wait = self.max_wait_s if due is None else min(self.max_wait_s, due)
                else:
                    wait = min(self.max_wait_s, 0.1)
        finally:
            self.close()

    def run_once(self, *, wait_s: float = 60.0) -> list[Outcome]:
        """One scheduling pass over the pending pods once both first lists are in (and the
        Lease is held, with leader election), then close; what became of each pod.

        Raises :class:`UserError` when the lists do not arrive within ``wait_s`` or another
        replica holds the Lease (binding beside it could give a GPU twice)."""
        from common.errors import UserError
        from kube.informer import start

        self._threads = [start(r) for r in self.reflectors]
        if self.server is not None:
            self.server.start()
        try:
            deadline = time.monotonic() + wait_s
            while not self.synced():
                if time.monotonic() > deadline:
                    raise UserError(
                        f"--once: the pods and nodes could not be listed within {wait_s:g}s "
                        f"from {self.kube.host} (is the API server reachable?)"
                    )
                self._drain(0.1)
            while self._drain(0.0):
                pass
            elector = self.elector
            if elector is not None:
                until = time.monotonic() + elector.lease_duration_s + elector.retry_period_s
                while not elector.try_acquire_or_renew():
                    if time.monotonic() > until or self.stop_event.wait(elector.retry_period_s):
                        raise UserError(
                            f"--once: {elector.holder or 'another replica'} holds the Lease "
                            f"{elector.namespace}/{elector.name}: binding beside it could give "
                            "a GPU twice (stop it, or add --dry-run)"
                        )
                self.leading = True
            self.scheduler.metrics.leader.set(1)
            pending = set(self.scheduler.queue.entries)
            self.scheduler.schedule()
            return [o for u, o in self.scheduler.outcomes.items() if u in pending]
        finally:
            self.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.inbox.put(("", "WAKE", None))
        for r in self.reflectors:
            r.stop()

    def close(self) -> None:
        """Stop the threads, release the lease, flush Events, close the connections."""
        self.stop()
        for t in self._threads:
            t.join(timeout=10)
            if t.is_alive():
                log.warning("thread %s did not stop within 10 s", t.name)
        if self.elector is not None:
            self.elector.release()
            self.scheduler.metrics.leader.set(0)
        self.recorder.close()
        if self.server is not None:
            self.server.stop()
        self.kube.close()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop after the current pass and release the lease."""

        def stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            self.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def build(
    cfg: SchedulerConfig,
    *,
    clock: Callable[[], float] = time.time,
    placer: Any = None,
    sync_events: bool = False,
    dry_run: bool = False,
) -> SchedulerApp:
    """Everything :meth:`SchedulerApp.run` needs, from the configuration.

    ``placer`` replaces the configured policy (tests wrap one to see its choices);
    ``sync_events`` writes Events inline instead of from the background thread; ``dry_run``
    decides and logs, writes nothing and takes no Lease.
    """
    from common.errors import UserError
    from common.metrics_server import Health, MetricsServer
    from kube.client import RetryPolicy, connect
    from kube.informer import Reflector
    from kube.pods import PodBinder, PodEventRecorder, PodEvictor, PodStatusWriter
    from scheduler.adapter import make_placer

    stop_event = threading.Event()
    try:
        # every request's backoff ends at once on stop: shutting down never waits one out
        retry = RetryPolicy(sleep=_interruptible_sleep(stop_event))
        kube = connect(kubeconfig=cfg.kubeconfig, context=cfg.context, retry=retry)
    except Exception as exc:  # the kubernetes config loader's many error types
        raise UserError(f"cannot configure the Kubernetes client: {exc}") from exc
    conv = cfg.conventions()
    me = cfg.leader_election.replica_identity()
    metrics = SchedulerMetrics()
    recorder = PodEventRecorder(
        kube, component=cfg.scheduler_name, instance=me, clock=clock, sync=sync_events
    )
    scheduler = Scheduler(
        placer=placer or make_placer(cfg.policy, seed=cfg.seed, workload=cfg.workload),
        binder=PodBinder(kube, gpus_annotation=conv.assigned_gpus_annotation),
        events=recorder,
        settings=SchedulerSettings(
            conventions=conv,
            backoff_initial_s=cfg.backoff.initial,
            backoff_max_s=cfg.backoff.max,
            flush_s=cfg.backoff.flush,
            fault_window_s=cfg.faults.window,
            event_repeat_s=cfg.events.repeat,
            scheduled_events=cfg.events.scheduled,
            namespaces=frozenset(cfg.namespaces),
            preemption=cfg.preemption.enabled,
            dry_run=dry_run,
        ),
        metrics=metrics,
        clock=clock,
        status=None if dry_run else PodStatusWriter(kube),
        evictor=None if dry_run else PodEvictor(kube),
    )
    app = SchedulerApp(
        scheduler=scheduler, kube=kube, reflectors=[], recorder=recorder, stop_event=stop_event
    )
    timeout = max(1, round(cfg.watch_timeout))
    app.reflectors = [
        Reflector(kube, "nodes", app.sink("nodes"), watch_timeout_s=timeout),
        Reflector(kube, "pods", app.sink("pods"), watch_timeout_s=timeout),
    ]
    if cfg.faults.events:  # Xid-style Events on Nodes (node-problem-detector's)
        app.reflectors.append(
            Reflector(
                kube,
                "events",
                app.sink("events"),
                field_selector="involvedObject.kind=Node",
                watch_timeout_s=timeout,
            )
        )
    le = cfg.leader_election
    if le.enabled and not dry_run:
        app.elector = le.elector(kube, identity=me, clock=clock)
    app.health = Health(stale_after_s=60.0, clock=clock)
    if cfg.metrics.port:
        try:
            app.server = MetricsServer(
                metrics,
                app.health,
                address=cfg.metrics.address,
                port=cfg.metrics.port,
            )
        except OSError as exc:
            raise UserError(
                f"metrics.port: cannot listen on {cfg.metrics.address}:{cfg.metrics.port}: {exc}"
            ) from exc
    return app


def _interruptible_sleep(stop: threading.Event) -> Callable[[float], None]:
    """A ``sleep`` for retry backoffs that returns as soon as ``stop`` is set."""

    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep
