"""Run the live demo: broker, replay, controller with local workers, dashboard; then stop all.

Why this module exists: the demo is the one command a newcomer runs, so it must show the
real system — the embedded Kafka broker, a multi-day trace replayed onto a topic, the
controller (the same ``build()`` as ``kale controller``) resizing real worker processes
through the Local actuator, the dashboard — and it must leave nothing behind: no process,
no port, whether it ends on time, on Ctrl-C or on SIGTERM.

Order of events: simulate the planned replay (the dashboard's comparison view has something
at once), start the broker and the topic, write the compressed job, start the controller
(its first tick starts the workers at the size the warm-up's last step needs, as the
simulator starts), serve the dashboard, then replay from a whole tick boundary (``wall0``).
At the end every part is stopped in reverse order in ``finally``; the summary is computed
from the timeline afterwards. Timing and units are in :mod:`autoscaler.demo.plan`.

The workers are :mod:`autoscaler.sources.demo_consumer` processes (one per worker, paced to
the fitted throughput of the job's size), not the reference trainer: a real trainer per
worker would need far more than two cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autoscaler.actuators.base import Actuator, Size
from autoscaler.demo import plan as plans
from autoscaler.demo.plan import DemoPlan
from autoscaler.demo.summary import live_metrics, simulate_segment, write_json
from autoscaler.errors import UserError

if TYPE_CHECKING:
    from autoscaler.controller.app import App
    from autoscaler.controller.jobs import JobEntry

log = logging.getLogger(__name__)

TOPIC = "clicks"
GROUP = "ctr-trainer"


@dataclass
class DemoOptions:
    plan: DemoPlan = field(default_factory=DemoPlan)
    host: str = "127.0.0.1"
    port: int = 8080
    """Dashboard port; when it is taken a free one is used (0: always a free one)."""
    open_browser: bool = True
    state_dir: Path | None = None
    """Keep the state here (None: a temporary folder, removed at the end)."""
    say: Callable[[str], None] = field(
        default=lambda line: print(line, file=sys.stderr, flush=True)
    )


@dataclass
class DemoResult:
    result: dict[str, Any]
    """``kale simulate --json``-shaped: ``policies`` (``kale-live`` first), lower bound, …"""
    wall_s: float
    interrupted: bool
    url: str
    state_dir: Path | None


class _Stopped(Exception):
    """Raised inside the replay's sleep when the demo stops."""


@contextlib.contextmanager
def _signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """Send log records to ``path`` (the terminal keeps the progress lines and the table)."""
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = (root.level, list(root.handlers))
    for h in saved[1]:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    kafka_level = logging.getLogger("kafka").level
    logging.getLogger("kafka").setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in saved[1]:
            root.addHandler(h)
        root.setLevel(saved[0])
        logging.getLogger("kafka").setLevel(kafka_level)


def run(opts: DemoOptions) -> DemoResult:
    """The whole demo; returns the comparison. Raises UserError on bad options."""
    started = time.monotonic()
    keep = opts.state_dir is not None
    state = Path(opts.state_dir or tempfile.mkdtemp(prefix="kale-demo-"))
    state.mkdir(parents=True, exist_ok=True)
    if keep and (state / "timeline.sqlite").exists():
        raise UserError(f"--state: {state} already holds a run; pick a new folder")
    stop = threading.Event()
    try:
        with _signals(stop), _log_to(state / "demo.log"):
            setup = _Setup(opts.plan, state)
            opts.say(
                f"[1/3] simulating the planned replay ({opts.plan.live_days:.1f} days of "
                f"{opts.plan.forecaster}-forecast traffic) for the dashboard"
            )
            write_json(
                setup.sim_path,
                setup.simulate(
                    setup.planned_steps,
                    title=("simulator on the planned replay (the live run replaces it at the end)"),
                ),
            )
            if stop.is_set():
                raise KeyboardInterrupt  # Ctrl-C before anything started: nothing to compare
            live = _Live(setup, opts, stop)
            interrupted = live.run()
            opts.say("[3/3] comparing with HPA on the same replay")
            result = setup.summary(live)
            write_json(setup.sim_path, result)
    finally:
        if not keep:
            shutil.rmtree(state, ignore_errors=True)
    return DemoResult(
        result=result,
        wall_s=time.monotonic() - started,
        interrupted=interrupted,
        url=live.url,
        state_dir=state if keep else None,
    )


class _Setup:
    """The trace, the job in both time bases, the scaled model, and the simulator runs."""

    def __init__(self, plan: DemoPlan, state: Path) -> None:
        from autoscaler.config import parse_job
        from autoscaler.policy.sizing import sizing_for
        from autoscaler.traces import save_trace

        self.plan, self.state = plan, state
        self.model = plans.load_model(plan)
        job, problems = parse_job(plans.job_doc(plan, wall=False))
        if job is None or problems:
            raise UserError(f"demo job: {problems}")
        self.job = job
        self.sizing = sizing_for(job, self.model, interval_s=plan.interval_s)
        self.trace = plans.trace(plan, self.sizing.peak_throughput)
        self.trace_origin = plans.trace_origin(plan, self.trace)
        self.records_scale = plans.records_scale(plan, self.trace)
        self.values = plans.on_interval(plan, self.trace)
        self.sim_path = state / "simulation.json"
        save_trace(self.trace, state / "trace.csv")
        warm = plan.warmup_steps
        self.w0 = self.sizing.workers_for(float(self.values[warm - 1]))[0]
        self.planned_steps = int(plan.live_trace_s // plan.interval_s)

    def simulate(self, steps: int, *, title: str) -> dict[str, Any]:
        plan = self.plan
        out = simulate_segment(
            plan, self.values, steps, sizing=self.sizing, job=self.job, start=self.trace.index[0]
        )
        out.update(
            title=title,
            job="demo/ctr-model",
            interval_s=plan.interval_s,
            slo_s=plan.slo_s,
            rescale_s=plan.rescale_s,
            warmup_steps=plan.warmup_steps,
            forecaster=plan.forecaster,
            peak_workers=self.sizing.peak_workers,
            trace=str(self.state / "trace.csv"),
        )
        return out

    def summary(self, live: _Live) -> dict[str, Any]:
        from autoscaler.controller.timeline import TimelineStore

        plan = self.plan
        rows: list[dict[str, Any]] = []
        path = self.state / "timeline.sqlite"
        if path.exists():
            store = TimelineStore(path, readonly=True)
            try:
                rows = store.rows()
            finally:
                store.close()
        end = live.wall_end if live.wall_end is not None else live.wall0
        steps = max(1, round((end - live.wall0) / plan.tick_s))
        metrics, series = live_metrics(
            rows,
            plan,
            wall_origin=live.wall0,
            wall_end=end,
            trace_origin=self.trace_origin.timestamp(),
        )
        sim = self.simulate(steps, title="kale demo: live Kale vs the simulator on the same replay")
        lb = sim["lower_bound_gpu_hours"]
        if metrics.get("steps") and lb > 0:
            metrics["lower_bound_ratio"] = metrics["gpu_hours"] / lb
        policies = {"kale-live": metrics} if metrics.get("steps") else {}
        policies.update(sim["policies"])
        sim["policies"] = policies
        if metrics.get("steps"):
            sim["series"]["policies"] = {"kale-live": {**series}, **sim["series"]["policies"]}
        sim.update(
            live_steps=metrics.get("steps", 0),
            replayed_days=steps * plan.interval_s / plans.DAY_S,
            records_sent=live.records_sent,
            speedup=plan.speedup,
            records_scale=self.records_scale,
            note=f"kale-live measured on {metrics.get('steps', 0)} controller ticks; "
            "the others simulated on the same trace segment",
        )
        return sim


class _Live:
    """The running parts and their orderly stop."""

    def __init__(self, setup: _Setup, opts: DemoOptions, stop: threading.Event) -> None:
        self.setup, self.opts, self.stop = setup, opts, stop
        self.plan = setup.plan
        self.url = ""
        self.wall0 = 0.0
        self.wall_end: float | None = None
        self.records_sent = 0
        self.replay_error: BaseException | None = None
        self.stamp_path = setup.state / "workers" / "resize-started"

    # -- pieces ---------------------------------------------------------------------------
    def _job_file(self, bootstrap: str) -> Path:
        plan, setup = self.plan, self.setup
        jobs = setup.state / "jobs"
        jobs.mkdir(exist_ok=True)
        model_path = jobs / "ctr-sync-demo.json"
        plans.scaled_model(setup.model, setup.records_scale).save(model_path)
        caps = [setup.records_scale * setup.sizing.rate(w) for w in range(1, plan.max_workers + 1)]
        command = [
            sys.executable,
            "-m",
            "autoscaler.sources.demo_consumer",
            "--bootstrap",
            bootstrap,
            "--topic",
            TOPIC,
            "--group",
            GROUP,
            "--capacity",
            ",".join(f"{c:.6g}" for c in caps),
            "--ready-after",
            f"{plan.wall(plan.rescale_s):.6g}",
            "--resize-stamp",
            str(self.stamp_path),
        ]
        doc = plans.job_doc(
            plan,
            wall=True,
            bootstrap=bootstrap,
            topic=TOPIC,
            group=GROUP,
            model=model_path.name,
            command=command,
        )
        path = jobs / "ctr-model.yaml"
        path.write_text(
            "# kale demo: the example CTR job, every duration divided by "
            f"{plan.speedup:g}\n" + yaml.safe_dump(doc, sort_keys=False),
            encoding="utf-8",
        )
        return path

    def _app(self) -> App:
        """The controller exactly as ``kale controller`` builds it, with the demo's time base
        passed in: planner windows and forecasts in compressed time, stamped resizes."""
        from autoscaler.controller.app import BuildOptions, build
        from autoscaler.controller.config import parse_controller_config

        plan, state = self.plan, self.setup.state
        cfg = parse_controller_config(
            {
                "apiVersion": "kale.dev/v1",
                "kind": "ControllerConfig",
                "interval": plan.tick_s,
                "jobs": {"directory": str(state / "jobs")},
                "quota": {"gpus": plan.quota_gpus},
                "metrics": {"port": 0},
                "meter": {"window": plan.tick_s, "timeout": 5.0, "threads": 1},
                "stateDir": str(state),
                "logFormat": "text",
                # Time is compressed: the job's interval is plan.tick_s, below the 10 s floor.
                "policy": {"limits": {"minForecastInterval": plan.tick_s}},
            },
            source="demo controller",
        )
        options = BuildOptions(
            planner=self._planner_settings(),
            forecaster_factory=self._forecasters(),
            wrap_actuator=self._stamped,
        )
        return build(cfg, options=options)

    def _stamped(self, entry: JobEntry, actuator: Actuator) -> Actuator:
        """The Local actuator, stamping each resize start, at the size the simulator starts at."""
        w0 = self.setup.w0
        act = StampingActuator(actuator, self.stamp_path)
        act.apply(Size(w0, self.setup.sizing.ps_for(w0)))  # steady state, as simulated
        return act

    def _planner_settings(self) -> Any:
        from autoscaler.policy.kale import KaleSettings

        d = KaleSettings()
        k = self.plan.speedup
        return dataclasses.replace(
            d,
            hold_windows_s=tuple(h / k for h in d.hold_windows_s),
            fallback_window_s=d.fallback_window_s / k,
        )

    def _forecasters(self) -> Callable[[Any], Any]:
        import pandas as pd

        from autoscaler.controller.factories import forecaster_factory
        from autoscaler.demo.warp import WarpedForecaster

        setup, plan = self.setup, self.plan
        base = forecaster_factory(plan.forecaster)
        warm = plan.warmup_steps
        # In the controller's units: records/s of the thinned replay.
        seed = pd.Series(
            setup.values[:warm] * setup.records_scale,
            index=pd.date_range(
                setup.trace.index[0], periods=warm, freq=pd.Timedelta(seconds=plan.interval_s)
            ),
        )

        def make(entry: Any) -> Any:
            return WarpedForecaster(
                base(entry),
                seed=seed,
                wall_origin=self.wall0,
                trace_origin=setup.trace_origin.timestamp(),
                speedup=plan.speedup,
                interval_s=plan.interval_s,
            )

        return make

    def _seed_history(self, topic_partitions: int) -> None:
        """The topic starts empty: say so, so the meter does not backfill it."""
        from autoscaler.sources.history import HistoryStore, StoredSnapshot

        with HistoryStore(self.setup.state / "history.sqlite") as history:
            history.append(
                StoredSnapshot(
                    topic=TOPIC,
                    group=GROUP,
                    time=time.time(),
                    end_total=0,
                    committed_total=0,
                    lag=0,
                    partitions=topic_partitions,
                    source="demo",
                )
            )

    def _replay(self, bootstrap: str) -> None:
        from autoscaler.sources import kafka_io
        from autoscaler.sources.replay import replay

        setup, plan = self.setup, self.plan
        segment = setup.trace[setup.trace.index >= setup.trace_origin]

        def sleep(seconds: float) -> None:
            if self.stop.wait(seconds):
                raise _Stopped

        producer = None
        try:
            producer = kafka_io.producer(bootstrap, client_id="kale-demo-replay")
            sleep(max(0.0, self.wall0 - time.time()))
            summary = replay(
                segment,
                bootstrap,
                TOPIC,
                speedup=plan.speedup,
                scale=setup.records_scale / plan.speedup,
                duration_s=plan.minutes * 60.0,
                progress=False,
                interval_s=60.0,
                clock=time.time,
                sleep=sleep,
                producer=producer,
            )
            self.records_sent = summary.records_sent
        except _Stopped:
            pass
        except BaseException as exc:  # reported by the main loop
            self.replay_error = exc
        finally:
            kafka_io.close_quietly(producer)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> bool:
        """Run until the replay ends or a signal; returns whether it was interrupted."""
        from autoscaler.dashboard.app import create_app
        from autoscaler.dashboard.server import DashboardServer
        from autoscaler.sources import kafka_io
        from autoscaler.sources.broker import EmbeddedBroker

        plan, opts, setup = self.plan, self.opts, self.setup
        say = opts.say
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap
            partitions = kafka_io.ensure_topic(bootstrap, TOPIC, plan.partitions)
            self._seed_history(partitions)
            self._job_file(bootstrap)
            app = self._app()
            runner_thread = threading.Thread(
                target=app.runner.run, name="kale-controller", daemon=True
            )
            replay_thread = threading.Thread(
                target=self._replay, args=(bootstrap,), name="kale-replay", daemon=True
            )
            server = None
            try:
                # Ticks on the grid; the replay starts once the workers had time to start.
                tick = plan.tick_s
                lead = 2.0 + plan.wall(plan.rescale_s)
                self.wall0 = math.ceil((time.time() + lead) / tick) * tick
                app.controller.timeline.set_meta(display=self._display())
                runner_thread.start()
                server = self._serve(create_app, DashboardServer)
                say(f"dashboard: {server.url}")
                self.url = server.url
                if opts.open_browser:
                    _open_browser(server.url)
                day = plans.DAY_S / plan.speedup
                say(
                    f"[2/3] live: broker {bootstrap}, topic {TOPIC} ({partitions} partitions), "
                    f"{plan.live_days:.1f} days of traffic from "
                    f"{setup.trace_origin:%a %Y-%m-%d} in {plan.minutes:g} min (a day every "
                    f"{day:.0f}s; a {plan.interval_s / 60:g}-min decision every {tick:g}s); "
                    "Ctrl-C stops early"
                )
                replay_thread.start()
                self._watch(app, runner_thread, replay_thread)
            finally:
                self.stop.set()
                self.wall_end = min(time.time(), self.wall0 + plan.minutes * 60.0)
                workers = _alive_workers(app)
                say(f"stopping: replay, controller, {workers} workers, dashboard, broker")
                if replay_thread.is_alive():
                    replay_thread.join(10)
                app.runner.stop()
                if runner_thread.is_alive():
                    runner_thread.join(30)
                app.close()
                if server is not None:
                    server.stop()
        if self.replay_error is not None:
            raise UserError(f"the replay failed: {self.replay_error}")
        return self.interrupted

    def _serve(self, create_app: Any, server_cls: Any) -> Any:
        from autoscaler.dashboard.hosts import allowed_hosts

        app = create_app(
            state_dir=self.setup.state,
            sim_results=[self.setup.sim_path],
            refresh_s=2.0,
            title="Kale demo",
            hosts=allowed_hosts(self.opts.host),
        )
        try:
            return server_cls(app, host=self.opts.host, port=self.opts.port).start()
        except UserError:
            if self.opts.port == 0:
                raise
            self.opts.say(f"port {self.opts.port} is taken; using a free one")
            return server_cls(app, host=self.opts.host, port=0).start()

    def _display(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "speedup": plan.speedup,
            "wall_origin": self.wall0,
            "trace_origin": self.setup.trace_origin.timestamp(),
            "rate_scale": 1.0 / self.setup.records_scale,
            "note": f"demo: trace time, {plan.speedup:g}× compressed "
            f"({plan.interval_s / 60:g} min per {plan.tick_s:g} s)",
        }

    interrupted = False

    def _watch(self, app: Any, runner: threading.Thread, replay: threading.Thread) -> None:
        plan = self.plan
        end = self.wall0 + plan.minutes * 60.0 + plan.tick_s  # the tick after the last step
        next_note = self.wall0 + 10.0
        while True:
            now = time.time()
            if self.stop.is_set():
                self.interrupted = True
                return
            if now >= end or (
                not replay.is_alive() and now > self.wall0 and self.replay_error is not None
            ):
                return
            if not runner.is_alive():
                raise UserError("the controller stopped unexpectedly (see the demo log)")
            if now >= next_note:
                self.opts.say(self._progress(app, now))
                next_note = now + 10.0
            self.stop.wait(min(0.5, max(0.01, end - now)))

    def _progress(self, app: Any, now: float) -> str:
        plan, setup = self.plan, self.setup
        day = (now - self.wall0) * plan.speedup / plans.DAY_S
        at = setup.trace_origin + _td((now - self.wall0) * plan.speedup)
        line = f"  day {day:4.1f}/{plan.live_days:.1f}  {at:%a %H:%M}"
        for rt in list(app.controller.runtimes.values()):
            # The latest complete observation (a tick clears its own while it measures).
            if rt.last_observed is None:
                continue
            _, s, cur = rt.last_observed
            line += (
                f"  arrival {s.arrival_rate / setup.records_scale / 1000:6.1f}k/s"
                f"  workers {cur.workers:2d}  oldest {s.oldest_age_s * plan.speedup / 60:5.1f}"
                f" min (SLO {plan.slo_s / 60:g})"
            )
        return line


class StampingActuator:
    """The Local actuator, writing when each resize begins to ``stamp`` first: the workers
    count their rescale downtime from it (see :mod:`autoscaler.sources.demo_consumer`)."""

    def __init__(self, inner: Actuator, stamp: Path) -> None:
        self.inner = inner
        self.stamp = stamp
        self.kind = inner.kind

    def current(self) -> Size:
        return self.inner.current()

    def apply(self, size: Size) -> Size:
        self.stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.stamp.with_suffix(".tmp")
        tmp.write_text(f"{time.time():.6f}", encoding="ascii")
        tmp.replace(self.stamp)
        return self.inner.apply(size)

    def close(self) -> None:
        self.inner.close()


def _td(seconds: float) -> Any:
    import pandas as pd

    return pd.Timedelta(seconds=seconds)


def _alive_workers(app: Any) -> int:
    n = 0
    for rt in list(app.controller.runtimes.values()):
        with contextlib.suppress(Exception):
            n += rt.actuator.current().workers
    return n


def _open_browser(url: str) -> None:
    """Open the page where a desktop exists (never a console browser in the terminal)."""
    import os
    import webbrowser

    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return
    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
