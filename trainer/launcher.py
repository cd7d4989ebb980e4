"""The supervisor of one training job: start, resize and stop PS/worker processes.

Why this module exists: a resize is the operation the autoscaler pays for, so it is done
here the way a cluster would do it (checkpoint, stop, start, load, stream rebuild), and
timed phase by phase (:class:`~trainer.rescale.ResizeTiming`). :class:`Trainer` is the
library twin of ``kale train``; the profiler and the tests drive it directly.

Protocol of :meth:`Trainer.resize` (and of :meth:`stop` / :meth:`start`, its two halves):

1. **stop** — every worker is told ``"stop"``; it finishes the in-flight step, commits its
   offsets, sends DONE to the PS, leaves the consumer group and exits (sync workers agree on
   the last step through the PS acks);
2. **checkpoint** — each PS, once all workers are done, writes its shard atomically; then
   the supervisor atomically replaces the manifest (:mod:`trainer.checkpoint`); the PS exit;
3. **start** — ``p'`` PS and ``w'`` worker processes are forked from a forkserver that has
   torch preloaded, and join a fresh gloo group;
4. **load** — each PS restores the blocks it owns from whichever shards hold them (p may
   have changed);
5. **stream rebuild** — the workers join the consumer group; the resize is over when every
   partition is assigned to exactly one worker and each assigned worker finished a step.

Children (forked by :mod:`trainer.children`) report through one pipe each (events, see
:mod:`trainer.node`); a pump thread (:mod:`trainer.pump`) reads them, keeps throughput
counters and the :class:`~trainer.ledger.OffsetLedger` of trained offsets, and notices
children that die. Any child failure aborts the job (:class:`TrainerError`) and
kills the other children: a half-running PS job only produces wrong gradients.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.errors import KaleError, UserError
from trainer import checkpoint
from trainer.children import ChildNode, Event, fork_children, node_configs
from trainer.config import TrainerConfig, validate_shape
from trainer.ledger import OffsetLedger, StepRecord
from trainer.pump import EventPump
from trainer.rescale import ResizeTiming


class TrainerError(KaleError):
    """A training process failed or did not answer in time (the message says which)."""


@dataclass(frozen=True)
class LaunchTiming:
    """The second half of a resize: processes up, PS restored, stream consuming."""

    start_s: float
    load_s: float
    stream_rebuild_s: float
    restored: bool = False
    """Whether the PS restored a checkpoint (False: fresh parameters)."""


@dataclass(frozen=True)
class ShutdownTiming:
    """The first half of a resize: workers drained, PS checkpointed, processes gone."""

    drain_s: float
    checkpoint_s: float
    exit_s: float
    manifest: Path | None = None


class Trainer(EventPump):
    """One training job's processes; ``start()``, ``resize(w, p)``, ``stop()``, ``close()``."""

    def __init__(
        self,
        config: TrainerConfig,
        *,
        workers: int,
        ps: int,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        validate_shape(config.spec, config.mode, config.global_batch, workers, ps)
        self.config = config
        self.workers = workers
        self.ps = ps
        self.on_event = on_event
        self.partitions: int | None = None
        self.generation = 0
        self.ledger = OffsetLedger()
        self.steps: deque[StepRecord] = deque(maxlen=config.history)
        self.samples_total = 0
        self.records_total = 0
        self.skipped_total = 0
        self.commit_failures = 0
        self.resizes: list[ResizeTiming] = []
        self._nodes: list[ChildNode] = []
        self._cond = threading.Condition()
        self._failure: str | None = None
        self._pump: threading.Thread | None = None
        self._closing = False
        self._run_id = f"{os.getpid()}-{int(time.time() * 1000) % 10**10}"

    # -- public API ------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return any(not n.closed for n in self._nodes)

    def start(self, *, wait_consuming: bool = True) -> LaunchTiming:
        """Start the processes (restoring the checkpoint if there is one)."""
        if self.running:
            raise TrainerError("the trainer is already running")
        self._prepare()
        return self._launch(wait_consuming=wait_consuming)

    def _prepare(self) -> None:
        if self.partitions is None:
            self.partitions = self._topic_partitions()
        self._ensure_pump()

    def stop(self) -> ShutdownTiming:
        """Drain the workers, checkpoint, and wait for every process to exit."""
        if not self.running:
            return ShutdownTiming(0.0, 0.0, 0.0)
        try:
            return self._shutdown()
        except BaseException:
            self.kill()
            raise

    def resize(
        self, workers: int, ps: int, *, between: Callable[[], None] | None = None
    ) -> ResizeTiming:
        """Checkpoint, stop, restart with ``workers``/``ps``, restore, rejoin; timed.

        ``between`` runs after the old processes are gone and before the new ones start; its
        time is in no phase (the profiler refills the stream there). On a stopped trainer this
        is a start with the new shape (its stop and checkpoint phases are zero).
        """
        validate_shape(self.config.spec, self.config.mode, self.config.global_batch, workers, ps)
        before = (self.workers, self.ps)
        self._prepare()
        down = self.stop()
        if between is not None:
            between()
        self.workers, self.ps = workers, ps
        up = self._launch(wait_consuming=True)
        timing = ResizeTiming(
            from_workers=before[0],
            from_ps=before[1],
            to_workers=workers,
            to_ps=ps,
            stop_s=down.drain_s + down.exit_s,
            checkpoint_s=down.checkpoint_s,
            start_s=up.start_s,
            load_s=up.load_s,
            stream_rebuild_s=up.stream_rebuild_s,
        )
        self.resizes.append(timing)
        self._emit({"event": "resized", "t": time.monotonic(), **timing.as_dict()})
        return timing

    def kill(self) -> None:
        """Kill every child now (no checkpoint); idempotent."""
        for node in self._nodes:
            with contextlib.suppress(Exception):
                if node.process.is_alive():
                    node.process.kill()
        for node in self._nodes:
            with contextlib.suppress(Exception):
                node.process.join(timeout=5)
            node.closed = True
            with contextlib.suppress(Exception):
                node.conn.close()

    def close(self) -> None:
        """Stop gracefully if running (kill on failure), and end the pump thread."""
        try:
            if self.running and self._failure is None:
                self.stop()
        finally:
            self.kill()
            self._closing = True
            if self._pump is not None:
                self._pump.join(timeout=5)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- measurements ----------------------------------------------------------------------

    def throughput(self, since: float, until: float | None = None) -> float:
        """Samples/s trained by all workers in the monotonic window (since, until]."""
        until = time.monotonic() if until is None else until
        if until <= since:
            return 0.0
        with self._cond:
            n = sum(s.samples for s in self.steps if since < s.t <= until)
        return n / (until - since)

    def window(self, since: float, until: float | None = None) -> list[StepRecord]:
        until = time.monotonic() if until is None else until
        with self._cond:
            return [s for s in self.steps if since < s.t <= until]

    def mean_loss(self, since: float = -math.inf, until: float = math.inf) -> float:
        """Mean per-sample loss of the steps completed in the window (NaN when none)."""
        with self._cond:
            rows = [s for s in self.steps if since < s.t <= until and s.samples > 0]
        n = sum(s.samples for s in rows)
        return sum(s.loss_sum for s in rows) / n if n else math.nan

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Block until ``predicate()`` (evaluated under the lock) holds; TrainerError on
        timeout or when a child failed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._failure is not None:
                    raise TrainerError(self._failure)
                if predicate():
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TrainerError(f"timed out after {timeout:g}s waiting for {what}")
                self._cond.wait(min(left, 0.5))

    def idle(self, seconds: float, until: Callable[[], bool] | None = None) -> bool:
        """Let the job run for ``seconds`` (raising if a child fails); True when ``until``
        became true first."""
        try:
            self.wait_for(until or (lambda: False), seconds, "the idle period")
        except TrainerError:
            if self._failure is not None:
                raise
            return False
        return True

    def wait_samples(self, n: int, timeout: float) -> None:
        """Wait until at least ``n`` samples have been trained (all generations)."""
        self.wait_for(lambda: self.samples_total >= n, timeout, f"{n} trained samples")

    # -- launch and shutdown ---------------------------------------------------------------

    def _topic_partitions(self) -> int:
        from autoscaler.kafka import clients

        admin = clients.admin_client(
            self.config.bootstrap, client_id="kale-trainer", security=self.config.security
        )
        try:
            return clients.topic_partitions(admin, self.config.bootstrap, self.config.topic)
        finally:
            clients.close_quietly(admin)

    def _launch(self, *, wait_consuming: bool) -> LaunchTiming:
        cfg = self.config
        try:
            plan = checkpoint.plan_from_manifest(cfg.checkpoint_dir, cfg.spec.to_dict())
        except checkpoint.CheckpointError as exc:
            raise UserError(str(exc)) from None
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.generation += 1
        gen = self.generation
        configs = node_configs(
            cfg,
            workers=self.workers,
            ps=self.ps,
            plan=plan,
            generation=gen,
            shard=f"shard-{self._run_id}-{gen}",
        )
        began = time.monotonic()
        nodes: list[ChildNode] = []
        try:
            fork_children(configs, into=nodes)
        finally:
            with self._cond:
                self._nodes = nodes
                self._cond.notify_all()
        self._emit(
            {
                "event": "starting",
                "t": began,
                "workers": self.workers,
                "ps": self.ps,
                "generation": gen,
                "restored": bool(plan),
            }
        )
        try:
            limit = cfg.start_timeout_s
            self.wait_for(
                lambda: all(n.ready_t is not None for n in nodes), limit, "processes to start"
            )
            ready = max(n.ready_t or began for n in nodes)
            self.wait_for(
                lambda: all(n.loaded_t is not None for n in nodes if n.cfg.role == "ps"),
                limit,
                "PS to load the checkpoint",
            )
            loaded = max([n.loaded_t or ready for n in nodes if n.cfg.role == "ps"] + [ready])
            consuming = loaded
            if wait_consuming:
                self.wait_for(self._consuming, limit, "the consumer group to rebalance")
                consuming = max(loaded, time.monotonic())
        except BaseException:
            self.kill()
            raise
        restored = all(n.restored for n in nodes if n.cfg.role == "ps")
        return LaunchTiming(ready - began, loaded - ready, consuming - loaded, restored)

    def _consuming(self) -> bool:
        """Every partition assigned to exactly one worker; each assigned worker has stepped."""
        workers = [n for n in self._nodes if n.cfg.role == "worker"]
        if any(n.assignment is None for n in workers):
            return False
        owned = [p for n in workers for p in (n.assignment or [])]
        if len(owned) != len(set(owned)):
            return False
        if self.partitions is not None and set(owned) != set(range(self.partitions)):
            return False
        return all(n.stepped_after_assignment for n in workers if n.assignment)

    def _shutdown(self) -> ShutdownTiming:
        cfg = self.config
        limit = cfg.stop_timeout_s
        nodes = list(self._nodes)
        workers = [n for n in nodes if n.cfg.role == "worker"]
        servers = [n for n in nodes if n.cfg.role == "ps"]
        began = time.monotonic()
        for n in workers:
            self._tell(n, "stop")
        self.wait_for(
            lambda: all(n.draining is not None or n.left is not None for n in workers),
            limit,
            "workers to finish their last step",
        )
        # The group leader leaves first: tansu keeps a leader that leaves after a follower as
        # the next generation's leader, and that generation then cannot sync (see stream.py).
        leaders = [n for n in workers if n.draining and n.draining.get("leader")]
        for n in leaders:
            self._tell(n, "leave")
        self.wait_for(
            lambda: all(n.left is not None for n in leaders), limit, "the group leader to leave"
        )
        for n in workers:
            self._tell(n, "leave")
        self.wait_for(lambda: all(n.left is not None for n in workers), limit, "workers to leave")
        drained = max([n.left["t"] for n in workers if n.left] + [began])
        self.wait_for(lambda: all(n.saved is not None for n in servers), limit, "PS checkpoints")
        blocks: dict[int, str] = {}
        for n in servers:
            assert n.saved is not None
            for idx in n.saved["blocks"]:
                blocks[int(idx)] = n.saved["path"]
        manifest = checkpoint.write_manifest(
            cfg.checkpoint_dir,
            spec=cfg.spec.to_dict(),
            blocks=blocks,
            info={
                "mode": cfg.mode,
                "workers": self.workers,
                "ps": self.ps,
                "samples": self.samples_total,
                "updates": max((int(n.saved["updates"]) for n in servers if n.saved), default=0),
            },
        )
        saved = time.monotonic()
        self.wait_for(lambda: all(n.closed for n in nodes), limit, "processes to exit")
        for n in nodes:
            n.process.join(timeout=limit)
        gone = time.monotonic()
        self._emit({"event": "stopped", "t": gone, "manifest": str(manifest)})
        return ShutdownTiming(drained - began, saved - drained, gone - saved, manifest)

    @staticmethod
    def _tell(node: ChildNode, message: str) -> None:
        with contextlib.suppress(OSError, EOFError):
            node.conn.send(message)

    # -- event pump ------------------------------------------------------------------------
