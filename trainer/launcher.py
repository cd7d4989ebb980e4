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

Children report through one pipe each (events, see :mod:`trainer.node`); a pump thread
reads them, keeps throughput counters and the :class:`OffsetLedger` of trained offsets, and
notices children that die. Any child failure aborts the job (:class:`TrainerError`) and
kills the other children: a half-running PS job only produces wrong gradients.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import multiprocessing as mp
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal

from autoscaler.errors import KaleError, UserError
from autoscaler.kafka_auth import LocalSecrets, SecretMissing, security_for
from autoscaler.sources.security import KafkaSecurity
from trainer import checkpoint
from trainer.rescale import ResizeTiming
from trainer.spawn import NodeConfig, run_node
from trainer.spec import ModelSpec

Mode = Literal["sync", "async"]
Event = dict[str, Any]


class TrainerError(KaleError):
    """A training process failed or did not answer in time (the message says which)."""


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def batch_sizes(mode: Mode, global_batch: int, workers: int) -> list[int]:
    """Per-worker batch: sync splits M exactly (m = M/w, remainders to the first workers);
    async gives every worker its own batch of M samples."""
    if mode == "async":
        return [global_batch] * workers
    base, extra = divmod(global_batch, workers)
    return [base + (1 if j < extra else 0) for j in range(workers)]


def validate_shape(spec: ModelSpec, mode: Mode, global_batch: int, workers: int, ps: int) -> None:
    """Raise UserError for a configuration the trainer cannot run."""
    if workers < 1 or ps < 1:
        raise UserError(f"workers and ps must be at least 1, got workers={workers}, ps={ps}")
    if ps > spec.n_blocks:
        raise UserError(
            f"ps={ps} is more than the model's {spec.n_blocks} parameter blocks "
            f"({spec.fields} embedding tables + {spec.n_blocks - spec.fields} dense layers)"
        )
    if mode == "sync" and global_batch < workers:
        raise UserError(
            f"global batch {global_batch} is smaller than workers={workers}: in sync mode each "
            "worker needs at least one sample per step"
        )


# ----------------------------------------------------------------------------- bookkeeping


class OffsetLedger:
    """Offsets trained per partition, as merged intervals, plus how many were trained twice.

    Workers take contiguous offset ranges per partition; the ledger proves "no sample lost"
    (the intervals cover [start, end)) and bounds duplicates (records trained more than once).
    """

    def __init__(self) -> None:
        self.intervals: dict[int, list[list[int]]] = {}
        self.trained: dict[int, int] = {}
        self.duplicates = 0

    def add(self, partition: int, first: int, last: int) -> None:
        """Record that offsets ``first..last`` (inclusive) of ``partition`` were trained."""
        if last < first:
            return
        self.trained[partition] = self.trained.get(partition, 0) + (last - first + 1)
        spans = self.intervals.setdefault(partition, [])
        lo, hi = first, last + 1
        i = bisect.bisect_left(spans, [lo, lo])
        if i > 0 and spans[i - 1][1] >= lo:
            i -= 1
        j = i
        overlap = 0
        while j < len(spans) and spans[j][0] <= hi:
            overlap += max(0, min(hi, spans[j][1]) - max(lo, spans[j][0]))
            lo, hi = min(lo, spans[j][0]), max(hi, spans[j][1])
            j += 1
        spans[i:j] = [[lo, hi]]
        self.duplicates += overlap

    def covered(self, partition: int) -> list[tuple[int, int]]:
        """Half-open intervals [lo, hi) of offsets trained at least once."""
        return [(a, b) for a, b in self.intervals.get(partition, [])]

    def total(self) -> int:
        return sum(self.trained.values())


@dataclass
class _Node:
    cfg: NodeConfig
    process: Any
    conn: Connection
    ready_t: float | None = None
    loaded_t: float | None = None
    restored: bool = False
    saved: Event | None = None
    draining: Event | None = None
    left: Event | None = None
    exited: bool = False
    closed: bool = False
    error: str | None = None
    assignment: list[int] | None = None
    assigned_t: float | None = None
    stepped_after_assignment: bool = False
    steps: int = 0
    samples: int = 0

    @property
    def name(self) -> str:
        return f"{self.cfg.role} {self.cfg.index}"


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


@dataclass(frozen=True)
class StepRecord:
    t: float
    worker: int
    samples: int
    loss_sum: float
    partial: bool
    generation: int
    phases: tuple[float, ...] = ()
    """Seconds spent reading, pulling, computing, pushing and committing."""


@dataclass(frozen=True)
class TrainerConfig:
    """A job's training settings (what ``kale train`` reads from the job file and flags)."""

    bootstrap: str
    topic: str
    group: str
    mode: Mode
    global_batch: int
    checkpoint_dir: Path
    spec: ModelSpec = field(default_factory=ModelSpec)
    batch_wait_s: float = 0.25
    """How long a worker waits to fill its batch before stepping with fewer samples."""
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 2_000
    check_crcs: bool = False
    """Verify Kafka record-batch CRCs (pure Python in kafka-python: halves the read rate)."""
    start_timeout_s: float = 120.0
    """Bound on each wait while starting (processes up, PS loaded, stream consuming)."""
    stop_timeout_s: float = 60.0
    """Bound on each wait while stopping (drain, checkpoint, exit)."""
    device: str = "auto"
    """Worker compute device: auto (CUDA when present), cpu or cuda."""
    history: int = 200_000
    """Step records kept for throughput and loss queries."""
    security: KafkaSecurity | None = None
    """The job's Kafka SASL/TLS, its Secrets read from the environment or files
    (:class:`autoscaler.kafka_auth.LocalSecrets`: a pod mounts them); None: plaintext."""

    @classmethod
    def from_job(
        cls,
        loaded: Any,
        *,
        bootstrap: str | None = None,
        checkpoint_dir: str | Path | None = None,
        secrets_dir: str | Path | None = None,
        **overrides: Any,
    ) -> TrainerConfig:
        """Settings of an ``autoscaler.config.LoadedJob`` (``--bootstrap`` overrides the job's)."""
        job = loaded.job
        kafka = job.spec.source.kafka
        directory = (
            Path(checkpoint_dir)
            if checkpoint_dir is not None
            else Path(".kale") / "checkpoints" / job.metadata.name
        )
        if "security" not in overrides:
            try:
                overrides["security"] = security_for(
                    kafka, job.metadata.namespace, LocalSecrets(secrets_dir).read
                )
            except SecretMissing as exc:
                raise UserError(f"{loaded.path or job.metadata.name}: {exc}") from None
        return cls(
            bootstrap=bootstrap or ",".join(kafka.bootstrap_servers),
            topic=kafka.topic,
            group=kafka.consumer_group,
            mode=job.spec.training.mode,
            global_batch=job.spec.training.global_batch_size,
            checkpoint_dir=directory,
            **overrides,
        )


_CTX: Any = None


@contextlib.contextmanager
def _main_hidden() -> Any:
    """Hide ``__main__``'s file and spec while forking children.

    multiprocessing makes a forkserver child re-import the parent's main script (to find
    functions defined there); ours are in importable modules, and re-running a script without
    a ``__main__`` guard would start a second trainer inside the child.
    """
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__
    }
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _context() -> Any:
    """The forkserver context, with torch and the node code preloaded once per supervisor."""
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["trainer.node"])
        _CTX = ctx
    return _CTX


# ----------------------------------------------------------------------------- supervisor


class Trainer:
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
        self._nodes: list[_Node] = []
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
        from autoscaler.sources import kafka_io

        admin = kafka_io.admin_client(
            self.config.bootstrap, client_id="kale-trainer", security=self.config.security
        )
        try:
            return kafka_io.topic_partitions(admin, self.config.bootstrap, self.config.topic)
        finally:
            kafka_io.close_quietly(admin)

    def _launch(self, *, wait_consuming: bool) -> LaunchTiming:
        cfg = self.config
        spec = cfg.spec.to_dict()
        try:
            plan = checkpoint.plan_from_manifest(cfg.checkpoint_dir, spec)
        except checkpoint.CheckpointError as exc:
            raise UserError(str(exc)) from None
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.generation += 1
        gen = self.generation
        ctx = _context()
        port = free_port()
        sizes = batch_sizes(cfg.mode, cfg.global_batch, self.workers)
        shard = f"shard-{self._run_id}-{gen}"
        common: dict[str, Any] = {
            "ps": self.ps,
            "workers": self.workers,
            "port": port,
            "mode": cfg.mode,
            "spec": spec,
            "bootstrap": cfg.bootstrap,
            "security": cfg.security,
            "topic": cfg.topic,
            "group": cfg.group,
            "device": cfg.device,
            "generation": gen,
        }
        configs = [
            NodeConfig(
                role="ps",
                index=i,
                batch=0,
                plan=plan,
                shard_path=str(cfg.checkpoint_dir / f"{shard}-{i}.pt"),
                **common,
            )
            for i in range(self.ps)
        ] + [
            NodeConfig(
                role="worker",
                index=j,
                batch=sizes[j],
                shard_path="",
                batch_wait_s=cfg.batch_wait_s,
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                check_crcs=cfg.check_crcs,
                **common,
            )
            for j in range(self.workers)
        ]
        began = time.monotonic()
        nodes: list[_Node] = []
        try:
            with _main_hidden():
                for node_cfg in configs:
                    parent, child = ctx.Pipe(duplex=True)
                    proc = ctx.Process(
                        target=run_node,
                        args=(node_cfg, child),
                        name=f"kale-{node_cfg.role}-{node_cfg.index}",
                        daemon=True,
                    )
                    proc.start()
                    child.close()
                    nodes.append(_Node(node_cfg, proc, parent))
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
    def _tell(node: _Node, message: str) -> None:
        with contextlib.suppress(OSError, EOFError):
            node.conn.send(message)

    # -- event pump ------------------------------------------------------------------------

    def _ensure_pump(self) -> None:
        if self._pump is None or not self._pump.is_alive():
            self._closing = False
            self._pump = threading.Thread(
                target=self._run_pump, name="kale-trainer-pump", daemon=True
            )
            self._pump.start()

    def _run_pump(self) -> None:
        while not self._closing:
            with self._cond:
                open_nodes = {n.conn: n for n in self._nodes if not n.closed}
            if not open_nodes:
                time.sleep(0.05)
                continue
            try:
                ready = wait(list(open_nodes), timeout=0.2)
            except OSError:
                ready = []
            events: list[Event] = []
            for ready_conn in ready:
                node = next(n for c, n in open_nodes.items() if c is ready_conn)
                conn = node.conn
                try:
                    while conn.poll():
                        events.append(self._handle(node, conn.recv()))
                except (EOFError, OSError):
                    self._on_closed(node)
            for event in events:
                self._emit(event)

    def _on_closed(self, node: _Node) -> None:
        with self._cond:
            node.closed = True
            expected = node.exited or (node.cfg.role == "worker" and node.left is not None)
            if not expected and self._failure is None and not self._closing:
                with contextlib.suppress(Exception):
                    node.process.join(timeout=2)
                code = getattr(node.process, "exitcode", None)
                detail = node.error or f"exit code {code}"
                self._failure = f"{node.name} of the training job failed: {detail}"
            self._cond.notify_all()

    def _handle(self, node: _Node, event: Event) -> Event:
        kind = event.get("event")
        with self._cond:
            t = float(event.get("t", time.monotonic()))
            if kind == "ready":
                node.ready_t = t
            elif kind == "loaded":
                node.loaded_t = t
                node.restored = bool(event.get("restored"))
            elif kind == "assignment":
                if event["kind"] == "assigned":
                    node.assignment = list(event["partitions"])
                    node.assigned_t = t
                    node.stepped_after_assignment = False
                else:
                    node.assignment = None
            elif kind == "step":
                self._record_step(node, event, t)
            elif kind == "draining":
                node.draining = event
            elif kind == "left":
                node.left = event
                self.commit_failures += int(event.get("commit_failures", 0))
            elif kind == "saved":
                node.saved = event
            elif kind == "exit":
                node.exited = True
            elif kind == "error":
                node.error = event.get("message")
                if self._failure is None and not self._closing:
                    self._failure = f"{node.name} of the training job failed: {node.error}"
            self._cond.notify_all()
        return {
            **event,
            "role": node.cfg.role,
            "index": node.cfg.index,
            "generation": node.cfg.generation,
        }

    def _record_step(self, node: _Node, event: Event, t: float) -> None:
        n = int(event["n"])
        node.steps += 1
        node.samples += n
        if node.assignment is not None:
            node.stepped_after_assignment = True
        self.samples_total += n
        self.records_total += int(event["records"])
        self.skipped_total += int(event["skipped"])
        for p, (first, last) in event["ranges"].items():
            self.ledger.add(int(p), int(first), int(last))
        loss = float(event["loss"]) if n else 0.0
        self.steps.append(
            StepRecord(
                t,
                node.cfg.index,
                n,
                loss,
                bool(event["partial"]),
                node.cfg.generation,
                tuple(event.get("phases", ())),
            )
        )

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)
