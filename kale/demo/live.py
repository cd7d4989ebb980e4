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
from the timeline afterwards. Timing and units are in :mod:`kale.demo.plan`; the
controller's compressed-time wiring in :mod:`kale.demo.wiring`, the trace segment and
the closing comparison in :mod:`kale.demo.segment`.

The workers are :mod:`autoscaler.kafka.local.demo_consumer` processes (one per worker, paced to
the fitted throughput of the job's size), not the reference trainer: a real trainer per
worker would need far more than two cores.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import UserError
from common.numbers import format_number
from kale.demo import plan as plans
from kale.demo.plan import DemoPlan
from kale.demo.process import alive_workers, log_to, open_browser, stop_on_signals
from kale.demo.segment import DemoSetup
from kale.demo.summary import write_json
from kale.demo.wiring import TOPIC, build_app, seed_history, write_job_file

log = logging.getLogger(__name__)


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
        with stop_on_signals(stop), log_to(state / "demo.log"):
            setup = DemoSetup(opts.plan, state)
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
            result = setup.summary(
                wall0=live.wall0, wall_end=live.wall_end, records_sent=live.records_sent
            )
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


PRE_ROLL_S = 2.0
"""Wall seconds of traffic replayed before the origin: the workers start about a tick plus
one rescale duration (1 s) after the controller, which itself starts 3–4 s before it."""


class _Live:
    """The running parts and their orderly stop."""

    def __init__(self, setup: DemoSetup, opts: DemoOptions, stop: threading.Event) -> None:
        self.setup, self.opts, self.stop = setup, opts, stop
        self.plan = setup.plan
        self.url = ""
        self.wall0 = 0.0
        self.wall_end: float | None = None
        self.records_sent = 0
        self.replay_error: BaseException | None = None
        self.stamp_path = setup.state / "workers" / "resize-started"

    # -- pieces ---------------------------------------------------------------------------
    def _replay(self, bootstrap: str) -> None:
        from autoscaler.kafka import clients
        from autoscaler.kafka.local.replay import replay

        setup, plan = self.setup, self.plan
        # The replay starts PRE_ROLL_S before the origin with the trace's own traffic of
        # those minutes, so the controller's first readings are the job's traffic (not an
        # empty topic it would size down for); the comparison counts from the origin.
        pre = PRE_ROLL_S
        first = setup.trace_origin - _td(pre * plan.speedup)
        segment = setup.trace[setup.trace.index >= first]

        def sleep(seconds: float) -> None:
            if self.stop.wait(seconds):
                raise _Stopped

        producer = None
        try:
            producer = clients.producer(bootstrap, client_id="kale-demo-replay")
            sleep(max(0.0, self.wall0 - pre - time.time()))
            summary = replay(
                segment,
                bootstrap,
                TOPIC,
                speedup=plan.speedup,
                scale=setup.records_scale / plan.speedup,
                duration_s=plan.minutes * 60.0 + pre,
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
            clients.close_quietly(producer)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> bool:
        """Run until the replay ends or a signal; returns whether it was interrupted."""
        from autoscaler.kafka import clients
        from autoscaler.kafka.local.broker import EmbeddedBroker
        from kale.dashboard.app import create_app
        from kale.dashboard.server import DashboardServer

        plan, opts, setup = self.plan, self.opts, self.setup
        say = opts.say
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap
            partitions = clients.ensure_topic(bootstrap, TOPIC, plan.partitions)
            seed_history(setup.state, partitions)
            write_job_file(setup, bootstrap=bootstrap, stamp_path=self.stamp_path)
            app = build_app(setup, wall_origin=lambda: self.wall0, stamp_path=self.stamp_path)
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
                timeline = app.controller.timeline
                assert timeline is not None, "the demo's controller always records a timeline"
                timeline.set_meta(display=self._display())
                runner_thread.start()
                server = self._serve(create_app, DashboardServer)
                say(f"dashboard: {server.url}")
                self.url = server.url
                if opts.open_browser:
                    open_browser(server.url)
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
                workers = alive_workers(app)
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
        from kale.dashboard.hosts import allowed_hosts

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
                f"  arrival {format_number(s.arrival_rate / setup.records_scale):>6}/s"
                f"  workers {cur.workers:2d}  oldest {s.oldest_age_s * plan.speedup / 60:5.1f}"
                f" min (SLO {plan.slo_s / 60:g})"
            )
        return line


def _td(seconds: float) -> Any:
    import pandas as pd

    return pd.Timedelta(seconds=seconds)
