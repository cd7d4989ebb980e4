"""``kale profile``: measure the trainer's throughput per (w, p) and how long a resize takes.

Why this module exists: the worker estimator fits the PS throughput model to measured
samples, and the planner plans with the measured rescale duration; both are only as good as
the measurements. This runs the real trainer (:class:`~trainer.launcher.Trainer`) on a real
stream and measures:

* **throughput** — for each configuration, the trainer runs; the first ``warmup_s`` seconds
  after the stream is consuming are discarded, then samples trained over ``seconds`` are
  counted (step completions, all workers);
* **rescale duration** — the sweep moves from one configuration to the next with
  :meth:`Trainer.resize` (checkpoint, stop, start, load, stream rebuild), so every move is a
  measured resize; when the sweep has fewer moves than ``rescales``, extra resizes go back and
  forth between the last two configurations.

A :class:`Feeder` thread keeps synthetic CTR records ahead of the trainer (it produces only
while fewer than ``ahead`` records are waiting), so throughput is the trainer's, not the
producer's. One Python producer makes ~40k records/s here, about what the trainer reads, so
the backlog is also refilled while the trainer is stopped between the two halves of each
resize (outside every timed phase). A row whose steps were often short of data is measured
again (up to twice) after a refill sized for four times the rate it saw; if it is still short it
is flagged ``stream_bound``
(a lower bound, not a capacity). The profile uses its own topic and group
(``kale-profile-<job>``) so it never writes into, or commits for, the job's real stream.
"""

from __future__ import annotations

import contextlib
import functools
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from trainer.config import Mode, TrainerConfig
from trainer.launcher import Trainer
from trainer.records import CTRTask
from trainer.rescale import RescaleMeasurement, ResizeTiming
from trainer.spec import ModelSpec

#: A row is stream-bound when more than this share of its steps found too few records.
STREAM_BOUND_SHARE = 0.2


@dataclass(frozen=True)
class ProfileSettings:
    """What to measure."""

    workers: tuple[int, ...]
    """Worker counts to measure."""
    ps: tuple[int, ...]
    """PS counts to measure (every worker count with every PS count)."""
    seconds: float = 30.0
    """Measured window per configuration (after the warm-up)."""
    warmup_s: float = 5.0
    """Discarded seconds after each start/resize once the stream is consuming."""
    rescales: int = 3
    """Resizes to time at least (the sweep's moves count; 0 skips the measurement)."""
    partitions: int | None = None
    """Partitions of the profile topic (default: 2 × the largest worker count, at least 4)."""
    min_ahead: int = 20_000
    """Records the feeder tops the backlog up to while a configuration is measured (the bulk
    is produced while the trainer is stopped, so the feeder does not compete for CPU)."""

    @property
    def configs(self) -> list[tuple[int, int]]:
        return [(w, p) for p in self.ps for w in self.workers]


@dataclass(frozen=True)
class ProfileRow:
    """One measured configuration."""

    workers: int
    ps: int
    throughput: float
    """Samples/s over the measured window."""
    mode: str
    samples: int
    """Samples trained in the window."""
    steps: int
    """Worker steps completed in the window."""
    window_s: float
    loss: float
    """Mean training loss over the window."""
    short_share: float
    """Share of the window's steps that found fewer records than their batch."""
    stream_bound: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProfileResult:
    rows: list[ProfileRow]
    rescale: RescaleMeasurement | None
    topic: str
    bootstrap: str
    produced: int = 0
    notes: list[str] = field(default_factory=list)

    def profile(self) -> Any:
        """The rows as a ``throughput.profile.Profile`` (what ``kale throughput fit`` reads)."""
        from throughput.profile import Profile

        return Profile.from_arrays(
            [r.workers for r in self.rows],
            [r.ps for r in self.rows],
            [r.throughput for r in self.rows],
            modes=[r.mode for r in self.rows],
            source="kale profile",
        )


class Feeder:
    """Produces synthetic CTR records while fewer than ``ahead()`` are waiting to be trained."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        task: CTRTask,
        *,
        consumed: Callable[[], int],
        ahead: Callable[[], int],
        chunk: int = 2_000,
        seed: int = 0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.task = task
        self.consumed = consumed
        self.ahead = ahead
        self.chunk = chunk
        self.rng = np.random.default_rng(seed)
        self.produced = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self._floor = 0  # a fill() in progress may ask for more than ahead()

    def waiting(self) -> int:
        return self.produced - self.consumed()

    def start(self) -> None:
        from autoscaler.kafka import clients

        self._producer = clients.producer(
            self.bootstrap, client_id="kale-profile-feeder", linger_ms=20, batch_size=256 * 1024
        )
        self._thread = threading.Thread(target=self._run, name="kale-profile-feeder", daemon=True)
        self._thread.start()

    def fill(self, records: int | None = None, timeout_s: float = 600.0) -> None:
        """Block until ``records`` (default ``ahead()``) records are waiting (bounded).

        The feeder keeps producing past ``ahead()`` until ``records`` are waiting.
        """
        target = self.ahead() if records is None else records
        self._floor = target
        deadline = time.monotonic() + timeout_s
        try:
            while self.waiting() < target:
                if self.error is not None:
                    raise self.error
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the feeder could not produce {target} records in time")
                time.sleep(0.05)
        finally:
            self._floor = 0

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.waiting() >= max(self.ahead(), self._floor):
                    self._stop.wait(0.05)
                    continue
                for value in self.task.records(self.chunk, self.rng):
                    self._producer.send(self.topic, value)
                self._producer.flush(timeout=30)
                self.produced += self.chunk
        except BaseException as exc:  # surfaced by fill() and stop()
            self.error = exc

    def stop(self) -> None:
        from autoscaler.kafka import clients

        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        clients.close_quietly(self._producer)


def _records_for(rate: float, settings: ProfileSettings) -> int:
    """Backlog for one configuration at ``rate``: warm-up plus window, with 50 % to spare."""
    return int(rate * (settings.warmup_s + settings.seconds) * 1.5) + settings.min_ahead


def _measure(trainer: Trainer, settings: ProfileSettings, mode: str) -> ProfileRow:
    trainer.idle(settings.warmup_s)
    began = time.monotonic()
    trainer.idle(settings.seconds)
    ended = time.monotonic()
    steps = trainer.window(began, ended)
    samples = sum(s.samples for s in steps)
    short = sum(1 for s in steps if s.partial) / len(steps) if steps else 1.0
    loss = trainer.mean_loss(began, ended)
    return ProfileRow(
        workers=trainer.workers,
        ps=trainer.ps,
        throughput=samples / (ended - began),
        mode=mode,
        samples=samples,
        steps=len(steps),
        window_s=ended - began,
        loss=loss,
        short_share=short,
        stream_bound=short > STREAM_BOUND_SHARE,
    )


def run_profile(
    *,
    bootstrap: str,
    topic: str,
    group: str,
    mode: Mode,
    global_batch: int,
    settings: ProfileSettings,
    spec: ModelSpec | None = None,
    on_progress: Callable[[str, dict[str, Any]], None] | None = None,
    trainer_overrides: dict[str, Any] | None = None,
) -> ProfileResult:
    """Measure every configuration of ``settings`` and the rescale duration.

    ``on_progress(kind, info)`` is called with ``("row", row dict)`` after each configuration
    and ``("resize", timing dict)`` after each resize (the CLI drives its progress bar).
    """
    from autoscaler.kafka import clients

    spec = spec or ModelSpec()
    configs = settings.configs
    if not configs:
        raise ValueError("nothing to profile: give at least one worker count and one PS count")
    partitions = settings.partitions or max(4, 2 * max(settings.workers))
    clients.ensure_topic(bootstrap, topic, partitions)
    report = on_progress or (lambda _kind, _info: None)
    rows: list[ProfileRow] = []
    timings: list[ResizeTiming] = []
    best = {"rate": 0.0}

    with tempfile.TemporaryDirectory(prefix="kale-profile-") as scratch:
        config = TrainerConfig(
            bootstrap=bootstrap,
            topic=topic,
            group=group,
            mode=mode,
            global_batch=global_batch,
            checkpoint_dir=Path(scratch),
            spec=spec,
            **(trainer_overrides or {}),
        )
        first_w, first_p = configs[0]
        trainer = Trainer(config, workers=first_w, ps=first_p)
        feeder = Feeder(
            bootstrap,
            topic,
            CTRTask(fields=spec.fields, seed=spec.seed),
            consumed=lambda: trainer.records_total,
            ahead=lambda: settings.min_ahead,
        )
        feeder.start()
        try:
            feeder.fill()
            trainer.start()
            for k, (w, p) in enumerate(configs):
                if k > 0:
                    need = _records_for(best["rate"], settings)
                    timing = trainer.resize(w, p, between=functools.partial(feeder.fill, need))
                    timings.append(timing)
                    report("resize", timing.as_dict())
                row = _measure(trainer, settings, mode)
                guess = max(row.throughput, best["rate"])
                # A plain loop, not tenacity: nothing failed; it measures again with more backlog.
                for _retry in range(2):
                    if not row.stream_bound:
                        break
                    # The backlog ran out, so the rate seen is only a lower bound: refill for
                    # four times it while stopped (a timed resize too), and measure again.
                    guess *= 4
                    need = _records_for(guess, settings)
                    timing = trainer.resize(w, p, between=functools.partial(feeder.fill, need))
                    timings.append(timing)
                    report("resize", timing.as_dict())
                    row = _measure(trainer, settings, mode)
                best["rate"] = max(best["rate"], row.throughput)
                rows.append(row)
                report("row", row.as_dict())
                if feeder.error is not None:
                    raise feeder.error
            back = configs[-2] if len(configs) > 1 else configs[-1]
            there = configs[-1]
            while len(timings) < settings.rescales:
                target = back if (trainer.workers, trainer.ps) == there else there
                trainer.idle(max(1.0, settings.warmup_s / 2))
                timing = trainer.resize(*target)
                timings.append(timing)
                report("resize", timing.as_dict())
            trainer.stop()
        finally:
            with contextlib.suppress(Exception):
                trainer.close()
            feeder.stop()
    notes = []
    bound = [r for r in rows if r.stream_bound]
    if bound:
        notes.append(
            "stream-bound (the feeder did not keep ahead; throughput is a lower bound): "
            + ", ".join(f"w={r.workers} p={r.ps}" for r in bound)
        )
    measurement = (
        RescaleMeasurement(
            tuple(timings[: max(settings.rescales, len(timings))]),
            mode=mode,
            measured_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            host=platform.node(),
            extra={
                "note": "local processes on one machine; add pod start and image pull "
                "times of the cluster to compare with production"
            },
        )
        if timings
        else None
    )
    return ProfileResult(rows, measurement, topic, bootstrap, feeder.produced, notes)
