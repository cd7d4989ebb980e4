"""One ``kale train`` run as a library call: start, report throughput, stop on a signal.

Why this module exists: the loop that starts a :class:`~trainer.launcher.Trainer`, reports
its throughput every few seconds and drains and checkpoints on the way out is what the
Local actuator relies on (it stops ``kale train`` with SIGTERM and starts it again at
another size). It lives here, not in the command, so it can be driven and tested without
click; the command only turns :class:`TrainEvent` objects into lines.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainer.config import TrainerConfig
from trainer.launcher import LaunchTiming, ShutdownTiming, Trainer


@dataclass(frozen=True)
class Started:
    """The processes are up and consuming."""

    config: TrainerConfig
    workers: int
    ps: int
    launch: LaunchTiming

    def as_json(self) -> dict[str, Any]:
        """The ``"started"`` line of ``kale train --json`` (a contract)."""
        c = self.config
        return {
            "event": "started",
            "workers": self.workers,
            "ps": self.ps,
            "mode": c.mode,
            "topic": c.topic,
            "group": c.group,
            **self.launch.__dict__,
        }


@dataclass(frozen=True)
class Throughput:
    """The rate and loss since the previous report."""

    elapsed_s: float
    workers: int
    ps: int
    samples_per_s: float
    trained: int
    loss: float
    """NaN when no step finished in the interval."""
    idle: bool
    """No sample was trained since the previous report (the topic is empty)."""

    def as_json(self) -> dict[str, Any]:
        """A ``"throughput"`` line of ``kale train --json`` (a contract)."""
        return {
            "event": "throughput",
            "elapsed_s": round(self.elapsed_s, 3),
            "workers": self.workers,
            "ps": self.ps,
            "samples_per_s": self.samples_per_s,
            "trained": self.trained,
            "loss": None if math.isnan(self.loss) else self.loss,
        }


@dataclass(frozen=True)
class Stopped:
    """Drained and checkpointed; nothing is left running."""

    trained: int
    commit_failures: int
    down: ShutdownTiming

    def as_json(self) -> dict[str, Any]:
        """The ``"stopped"`` line of ``kale train --json`` (a contract)."""
        return {
            "event": "stopped",
            "trained": self.trained,
            "commit_failures": self.commit_failures,
            "checkpoint": str(self.down.manifest) if self.down.manifest else None,
            "drain_s": self.down.drain_s,
            "checkpoint_s": self.down.checkpoint_s,
        }


TrainEvent = Started | Throughput | Stopped


def train(
    config: TrainerConfig,
    *,
    workers: int,
    ps: int,
    stop: threading.Event,
    on_event: Callable[[TrainEvent], None],
    seconds: float | None = None,
    report_every: float = 5.0,
) -> Stopped:
    """Train until ``stop`` is set or ``seconds`` have passed, reporting every
    ``report_every``; then drain, checkpoint and close. Returns (and reports) the stop.

    Times are ``time.monotonic`` (the trainer's step records use it too)."""
    clock = time.monotonic
    trainer = Trainer(config, workers=workers, ps=ps)
    began = clock()
    try:
        on_event(Started(config, workers, ps, trainer.start()))
        deadline = None if seconds is None else clock() + seconds
        last_t, last_n = clock(), trainer.samples_total
        while not stop.is_set():
            wait = report_every if deadline is None else min(report_every, deadline - clock())
            if trainer.idle(max(0.0, wait), until=stop.is_set):
                break
            now, n = clock(), trainer.samples_total
            rate = (n - last_n) / max(now - last_t, 1e-9)
            loss = trainer.mean_loss(last_t, now)
            on_event(Throughput(now - began, workers, ps, rate, n, loss, idle=n == last_n))
            last_t, last_n = now, n
            if deadline is not None and now >= deadline:
                break
        down = trainer.stop()
    finally:
        trainer.close()
    stopped = Stopped(trainer.samples_total, trainer.commit_failures, down)
    on_event(stopped)
    return stopped


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (a second SIGINT interrupts for real)."""

    def on_term(_sig: int, _frame: Any) -> None:
        stop.set()

    def on_int(_sig: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in ((signal.SIGTERM, on_term), (signal.SIGINT, on_int))
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
