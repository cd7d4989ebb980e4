"""The reconcile loop: one :meth:`Controller.tick` measures, plans, approves and acts for all jobs.

A tick, level-triggered (it reads the world every time and acts on the difference, so
running it twice, or after a restart, converges to the same state), is a pipeline of
stages, each a function of the values the stages before it returned
(:mod:`autoscaler.controller.tick`):

1. **sync** the jobs with the listing (directory or cluster;
   :mod:`~autoscaler.controller.job_sync`): a failure to list skips the tick and keeps every
   job as it is; jobs no longer listed are forgotten (their GPUs return to the pool);
2. **observe** each job (:mod:`~autoscaler.controller.observing`) → an
   :class:`~autoscaler.controller.tick.Observation`: its current size from the actuator and
   a Kafka sample from its metric source (on bounded thread pools, waited for at most
   ``observe_deadline_s``: a job whose measurement is still running holds its size; it
   never holds up the others);
3. **forecast and plan** each job (:func:`~autoscaler.controller.planning.plan_job`) → a
   :class:`~autoscaler.controller.tick.Plan`: the same :class:`KalePolicy` the simulator
   runs, fed the arrival history and the job's live forecast. Missing metrics mean *hold
   the current size* — never a zero load, never a scale to zero — and a
   ``MetricsAvailable=False`` condition;
4. **approve** all wishes in one round of the GPU :class:`ResourceManager` (priority,
   minimum guarantees, max-min fair when short) before any GPU is given or taken back
   (:func:`~autoscaler.controller.planning.approve`) → the approved sizes;
5. **act** where the approved size differs from the current one
   (:mod:`~autoscaler.controller.acting`: resize markers, concurrent bounded writes) → an
   :class:`~autoscaler.controller.tick.Outcome` per job;
6. **report** (:mod:`~autoscaler.controller.reporting`): status on the job (sizes, last
   decision, forecast summary, conditions, planner state), an Event per resize, Prometheus
   metrics, one JSON log line per decision — then **save** every job's state.

Every stage runs every job under the tick's :class:`~autoscaler.controller.guard.Guard`
(:mod:`autoscaler.controller.isolation`): an exception of any type marks that job and the
tick goes on with the others. The stages import none of this module; it composes them.

Everything with a clock takes ``clock`` (epoch seconds); nothing here sleeps.
"""

from __future__ import annotations

import gc
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autoscaler.actuators.base import Actuator
from autoscaler.controller.acting import Act
from autoscaler.controller.forecast import FitPool
from autoscaler.controller.guard import Guard
from autoscaler.controller.isolation import safe_text
from autoscaler.controller.job_sync import BuildFailure, JobSync
from autoscaler.controller.jobs import JobEntry, JobsSource, Listing
from autoscaler.controller.metering import MetricSource
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.observing import Observe
from autoscaler.controller.planning import approve, plan_job
from autoscaler.controller.reporting import Report
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import Clock, ControllerSettings
from autoscaler.controller.sharding import Ownership, owned_part
from autoscaler.controller.sinks import EventSink, NullSink, StatusSink
from autoscaler.controller.state import (
    MemoryStateStore,
    SavedState,
    StateStore,
    live_restart_view,
)
from autoscaler.controller.status import JobReport
from autoscaler.controller.tick import NOTHING_OBSERVED, Plan, Tick, TickEvents
from autoscaler.controller.timeline import TimelineStore
from autoscaler.controller.workers import DaemonPool
from autoscaler.policy.quota import ResourceManager
from autoscaler.policy.types import JobSizing
from common.errors import KaleError

log = logging.getLogger(__name__)


@contextmanager
def _collect_after() -> Iterator[None]:
    """Pause the cyclic garbage collector while a tick runs; after it, collect as the
    collector would have.

    A tick makes a few objects per job in every stage, which all live until the tick ends
    (or the next tick replaces them) and are then freed by reference counting. A collection
    in the middle of the tick scans them all for no garbage (with many jobs, several
    collections a tick). Once the tick is over the young generation is collected only when
    it has grown past its threshold (what the collector does itself at its next allocation),
    together with the middle one (the survivors go to the oldest generation, not scanned
    twice), and the oldest as often as the collector would collect it. A tick whose
    objects stayed under the threshold leaves them uncollected: most are freed by reference
    counting during the next tick, before any collection walks them. A collector that is
    off (``gc.disable()``) stays off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        young, _, old = gc.get_count()
        threshold = gc.get_threshold()
        if young > threshold[0]:
            gc.collect(2 if old > threshold[2] else 1)


class Controller:
    """See the module docstring. All collaborators are injected:

    * ``jobs_source.list() -> Listing``;
    * ``meter_factory(entry) -> MetricSource``; ``forecaster_factory(entry) -> Forecaster``
      (fresh, unfitted); ``actuator_factory(entry) -> Actuator``;
    * ``sizing_factory(entry) -> JobSizing`` (default: from the job's throughput model);
    * ``resource_manager``: the GPU quota (None: unlimited);
    * ``status_sink``, ``event_sink``, ``metrics``, ``state_store``; ``clock`` (epoch s);
    * ``ownership``: the shards this replica holds, when jobs are spread over replicas.

    They stay attributes (replaceable between ticks); each tick hands the stages the ones
    they use.
    """

    def __init__(
        self,
        *,
        jobs_source: JobsSource,
        meter_factory: Callable[[JobEntry], MetricSource],
        forecaster_factory: Callable[[JobEntry], Any],
        actuator_factory: Callable[[JobEntry], Actuator],
        resource_manager: ResourceManager | None = None,
        clock: Clock = time.time,
        sizing_factory: Callable[[JobEntry], JobSizing] | None = None,
        status_sink: StatusSink | None = None,
        event_sink: EventSink | None = None,
        metrics: ControllerMetrics | None = None,
        state_store: StateStore | None = None,
        settings: ControllerSettings | None = None,
        timeline: TimelineStore | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        self.jobs_source = jobs_source
        self.meter_factory = meter_factory
        self.forecaster_factory = forecaster_factory
        self.actuator_factory = actuator_factory
        self.resources = resource_manager
        self.clock = clock
        if sizing_factory is None:
            from autoscaler.controller.factories import ModelCache, job_sizing

            models = ModelCache()

            def sizing_factory(entry: JobEntry) -> JobSizing:
                return job_sizing(entry.loaded, models, model_data=entry.model_data)

        self.sizing_factory = sizing_factory
        self.status_sink: StatusSink = status_sink or NullSink()
        self.event_sink: EventSink = event_sink or NullSink()
        self.metrics = metrics or ControllerMetrics()
        self.store: StateStore = state_store or MemoryStateStore()
        self.settings = settings or ControllerSettings()
        self.timeline = timeline
        """Per-tick history (:class:`~autoscaler.controller.timeline.TimelineStore`) or None."""
        self.ownership = ownership
        """The shards this replica plans (None: every job; see :mod:`.sharding`)."""
        self.runtimes: dict[str, JobRuntime] = {}
        """The jobs managed now."""
        self.invalid: dict[str, list[str]] = {}
        """The problems of each listed job that cannot be managed."""
        self.on_progress: Callable[[], None] | None = None
        """Called as slow work finishes (the runner beats the liveness probe with it)."""
        self.ticks = 0
        """Ticks started so far (the next tick's number)."""
        self._build_failures: dict[str, BuildFailure] = {}
        self._unsaved: set[str] = set()
        """Jobs whose latest state is not written yet (:meth:`_save` waits for its turn)."""
        s = self.settings
        self._fits = FitPool(s.fit_threads) if s.fit_threads > 0 else None
        self._meter_pool = (
            DaemonPool(s.observe_threads, name="kale-observe") if s.observe_threads > 1 else None
        )
        self._act_pool = DaemonPool(s.act_threads, name="kale-act") if s.act_threads > 1 else None
        self._quota = None if resource_manager is None else resource_manager.quota_gpus
        """The whole GPU quota; a replica holding some of the shards gets their share."""
        self.metrics.quota_total.set(-1 if self._quota is None else self._quota)

    # -- the tick ------------------------------------------------------------------------
    def tick(self) -> list[JobReport]:
        """One reconcile round over every job; returns what happened to each.

        The cyclic garbage collector waits until the round is over (:func:`_collect_after`).
        """
        with _collect_after():
            reports = self._round()
        return reports

    def _round(self) -> list[JobReport]:
        started = time.perf_counter()
        tick = Tick(self.ticks, self.clock())
        self.ticks += 1
        now = tick.now
        try:
            listing = self.jobs_source.list()
        except Exception as exc:  # whatever reading the jobs raised: skip, keep every job
            self.metrics.errors.labels(kind="list").inc()
            log.error(
                "cannot list jobs, keeping every job as it is: %s",
                safe_text(exc),
                exc_info=not isinstance(exc, KaleError | OSError),
                extra={"fields": {"event": "list_failed", "error": safe_text(exc)}},
            )
            return []
        elsewhere: set[str] = set()
        if self.ownership is not None:
            held = self.ownership.held()
            self.metrics.shards_held.set(len(held))
            self.metrics.shards_total.set(self.ownership.shards)
            listing, elsewhere = owned_part(listing, held, self.ownership.shards)
            if self.resources is not None and self._quota is not None:
                share = self._quota * len(held) // self.ownership.shards
                self.resources.quota_gpus = share
                self.metrics.quota_total.set(share)
        sync = self._sync(listing, now, elsewhere)
        runtimes = list(self.runtimes.values())
        guard, events = Guard(self.metrics), TickEvents()
        found = {rt.key: rt.state.conditions for rt in runtimes}
        act, report = self._act_stage(), self._report_stage(sync)
        act.collect_late(runtimes, tick, guard, events)
        report.collect_late(runtimes)
        observations = self._observe_stage()(runtimes, tick, guard)
        for rt in runtimes:
            seen = rt.observed = observations.get(rt.key, NOTHING_OBSERVED)
            if seen.current is not None and seen.sample is not None:
                rt.last_observed = (now, seen.sample, seen.current)
        plans: dict[str, Plan] = {}
        for rt in runtimes:
            plan = guard.run(rt, "plan", plan_job, rt, observations[rt.key], tick, self.metrics)
            if plan is not None:
                plans[rt.key] = plan
        approvals = approve(
            self.resources, runtimes, observations, plans, tick, guard, self.metrics
        )
        if self.ownership is not None:
            runtimes = self._fenced(runtimes, sync)
        outcomes = act(runtimes, observations, plans, approvals, tick, guard, events)
        reports = report(runtimes, observations, plans, outcomes, found, tick, guard, events)
        self._save([rt for rt in runtimes if rt.key in self.runtimes])
        self.metrics.jobs.labels(state="valid").set(len(self.runtimes))
        self.metrics.jobs.labels(state="invalid").set(len(self.invalid))
        if self.resources is not None:
            self.metrics.quota_used.set(sum(self.resources.held.values()))
        if self._fits is not None:
            self.metrics.fits_queued.set(self._fits.queued())
        self.metrics.tick_seconds.observe(time.perf_counter() - started)
        self.metrics.last_tick.set(now)
        return reports

    # -- the stages, with this controller's collaborators ---------------------------------
    def _fenced(self, runtimes: list[JobRuntime], sync: JobSync) -> list[JobRuntime]:
        """The jobs whose shard this replica still holds on the server; the others are
        forgotten before anything is acted on (another replica owns them now)."""
        assert self.ownership is not None
        ok: dict[int, bool] = {}
        kept = []
        for rt in runtimes:
            shard = rt.shard if rt.shard is not None else 0
            if shard not in ok:
                ok[shard] = self.ownership.fence(shard)
                if not ok[shard]:
                    self.metrics.errors.labels(kind="fence").inc()
                    log.warning(
                        "shard %d was lost before acting; its jobs are left to its new owner",
                        shard,
                        extra={"fields": {"event": "shard_lost", "shard": shard}},
                    )
            if ok[shard]:
                kept.append(rt)
            else:
                sync.forget(rt.key, why=f"shard {shard} was lost before acting")
        return kept

    def _sync(self, listing: Listing, now: float, elsewhere: set[str] | None = None) -> JobSync:
        """The sync stage: the managed jobs in step with ``listing``."""
        sync = JobSync(
            runtimes=self.runtimes,
            invalid=self.invalid,
            build_failures=self._build_failures,
            meter_factory=self.meter_factory,
            forecaster_factory=self.forecaster_factory,
            actuator_factory=self.actuator_factory,
            sizing_factory=self.sizing_factory,
            resources=self.resources,
            metrics=self.metrics,
            store=self.store,
            settings=self.settings,
            status_sink=self.status_sink,
            event_sink=self.event_sink,
            fits=self._fits,
        )
        try:
            sync.sync(listing, now, elsewhere or set())
        finally:
            self.invalid = sync.invalid
        return sync

    def _observe_stage(self) -> Observe:
        return Observe(
            self.settings, self.metrics, self._meter_pool, self._act_pool, self.on_progress
        )

    def _act_stage(self) -> Act:
        return Act(
            settings=self.settings,
            metrics=self.metrics,
            store=self.store,
            status_sink=self.status_sink,
            writes_status=self._writes_status(),
            clock=self.clock,
            act_pool=self._act_pool,
            progress=self.on_progress,
        )

    def _report_stage(self, sync: JobSync) -> Report:
        return Report(
            settings=self.settings,
            metrics=self.metrics,
            status_sink=self.status_sink,
            event_sink=self.event_sink,
            writes_status=self._writes_status(),
            timeline=self.timeline,
            act_pool=self._act_pool,
            forget=sync.forget,
            progress=self.on_progress,
        )

    def _writes_status(self) -> bool:
        return not isinstance(self.status_sink, NullSink)

    # -- the end of the tick ---------------------------------------------------------------
    def _save(self, runtimes: list[JobRuntime]) -> None:
        """The end of a tick: write the states due (:meth:`_write`)."""
        self._write(runtimes, every_state=False)

    def _write(self, runtimes: list[JobRuntime], *, every_state: bool) -> None:
        """The states to write in one transaction; a state that cannot be stored fails alone.

        At the end of a tick a state is written when what a restart needs changed since
        it was last written (:func:`restart_view`), and otherwise on its own tick of every
        ``save_every_ticks``: most ticks change only the forecast band and the messages,
        and encoding every job's state every tick was a fifth of a steady tick. A view
        that cannot be compared counts as changed. ``every_state`` (on closing): all given.
        """
        every = max(1, self.settings.save_every_ticks)
        tick = self.ticks - 1  # the number of the tick ending
        states: dict[str, SavedState] = {}
        views: dict[str, tuple[Any, ...]] = {}
        for rt in runtimes:
            try:
                view = live_restart_view(rt.state)
                if (
                    not every_state
                    and (tick + rt.save_phase) % every
                    and rt.saved_view is not None
                    and view == rt.saved_view
                ):
                    self._unsaved.add(rt.key)
                    continue
                states[rt.key] = rt.state.to_dict()
                views[rt.key] = view
            except Exception as exc:
                self.metrics.job_error(rt.key, "save", type(exc).__name__)
        saved: list[str] = []
        try:
            self.store.save_many(states)
            saved = list(states)
        except Exception as exc:
            log.warning("saving the job states together failed, one by one: %s", safe_text(exc))
            for key, state in states.items():
                try:
                    self.store.save_many({key: state})
                    saved.append(key)
                except Exception as exc:
                    self.metrics.job_error(key, "save", type(exc).__name__)
                    log.error("cannot save the state of %s: %s", key, safe_text(exc))
        for key in saved:
            self._unsaved.discard(key)
            kept = self.runtimes.get(key)
            if kept is not None:
                kept.saved_view = _private_copy(views[key])

    def close(self) -> None:
        """Write the states the last ticks left unwritten, close every job's meter and
        actuator (local workers stop)."""
        unsaved = [rt for key, rt in self.runtimes.items() if key in self._unsaved]
        if unsaved:
            self._write(unsaved, every_state=True)
        for key in list(self.runtimes):
            self.runtimes.pop(key).close()
        for pool in (self._meter_pool, self._act_pool, self._fits):
            if pool is not None:
                pool.close()
        self.store.close()
        if self.timeline is not None:
            self.timeline.close()


def _private_copy(view: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A copy sharing nothing with the live state (the planner changes its lists in place);
    None where it cannot be made, which counts as changed."""
    try:
        out: tuple[Any, ...] = pickle.loads(pickle.dumps(view, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return None
    return out
