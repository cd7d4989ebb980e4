"""The supervisor's event pump: one thread reads every child's pipe and keeps the counts.

Why a module of its own: children report everything (ready, loaded, partition assignment,
each step with its offset ranges, drained, checkpoint saved, exit, error) as events, and
this is the one place that turns them into the supervisor's state under its lock — the
step records, the :class:`~trainer.ledger.OffsetLedger` and the first failure, which aborts
the job. Mixed into :class:`~trainer.launcher.Trainer`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait

from trainer.children import ChildNode, Event
from trainer.ledger import OffsetLedger, StepRecord


class EventPump:
    """Mixed into :class:`~trainer.launcher.Trainer` (its attributes are used)."""

    on_event: Callable[[Event], None] | None
    ledger: OffsetLedger
    steps: deque[StepRecord]
    samples_total: int
    records_total: int
    skipped_total: int
    commit_failures: int
    _nodes: list[ChildNode]
    _cond: threading.Condition
    _failure: str | None
    _pump: threading.Thread | None
    _closing: bool

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

    def _on_closed(self, node: ChildNode) -> None:
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

    def _handle(self, node: ChildNode, event: Event) -> Event:
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

    def _record_step(self, node: ChildNode, event: Event, t: float) -> None:
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
