"""``async_transformer``'s dual-thread machinery: decide with one network while another trains.

* :class:`SnapshotPublisher` — the inference network as immutable *snapshots*. The trainer
  publishes a fresh copy of its weights (a new module, never written again) and swaps the
  reference under a lock; a decision takes the current reference once and runs on it, so it
  never sees half-copied weights and never waits for the trainer (a double buffer whose
  swap is one reference assignment). Each snapshot carries its version and a checksum of
  its weights, so tests can check that every decision used exactly a published snapshot.
* :class:`ExperienceBuffer` — the experience store both threads share (a lock around short
  appends and copies), with the document's duplicate removal.
* :class:`TrainerThread` — trains a step whenever the decision side says enough new
  experience arrived, and publishes when it asked for a copy (every ``copy_every``
  decisions). A trainer slower than the decisions does not build a backlog: requests that
  arrive while it trains fold into one next step (it trains on the freshest data, as fast as
  it can). ``synchronous`` runs every requested step inline in the deciding thread instead:
  deterministic, for tests and reproducible training; the threaded mode is not (which steps
  run, and when, depends on the machine's timing).

Torch threads: every agent configures ``torch.set_num_threads(1)``. The intra-op pool is
process-wide, so with one thread each Python thread's ops run on its own core: on a 2-core
machine the decision thread keeps one core while the trainer uses the other, instead of
both fighting over a shared pool of two.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn


def weights_checksum(net: nn.Module) -> str:
    """A digest of every parameter and buffer (order and bytes)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for name, tensor in net.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Snapshot:
    """A published, never-modified copy of the trained network."""

    version: int
    net: nn.Module
    checksum: str


class SnapshotPublisher:
    """The current inference snapshot (module docstring)."""

    def __init__(self, net: nn.Module, *, keep_history: bool = False) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self.history: list[str] | None = [] if keep_history else None
        """Checksums of every published snapshot (when kept)."""
        self._current = self._freeze(net)

    def _freeze(self, net: nn.Module) -> Snapshot:
        frozen = copy.deepcopy(net).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
        snap = Snapshot(self._version, frozen, weights_checksum(frozen))
        if self.history is not None:
            self.history.append(snap.checksum)
        return snap

    def current(self) -> Snapshot:
        """The latest snapshot (a reference read: never blocks)."""
        return self._current

    def publish(self, net: nn.Module) -> Snapshot:
        """Copy ``net``'s weights into a new snapshot and make it current."""
        with self._lock:
            self._version += 1
            snap = self._freeze(net)
            self._current = snap
        return snap


class ExperienceBuffer:
    """A ring of experiences shared by the two threads; exact duplicates are dropped."""

    def __init__(self, capacity: int, shapes: dict[str, tuple[tuple[int, ...], Any]]) -> None:
        self.capacity = capacity
        self.data = {k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in shapes.items()}
        self.keys: list[bytes | None] = [None] * capacity
        self.index: dict[bytes, int] = {}
        self.size = 0
        self.added = 0
        """Experiences accepted so far (duplicates excluded)."""
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def add(self, **fields: Any) -> bool:
        """Store one experience unless an identical one is stored; True if stored."""
        key = hashlib.sha1(
            b"".join(np.ascontiguousarray(fields[k]).tobytes() for k in self.data),
            usedforsecurity=False,
        ).digest()
        with self._lock:
            if key in self.index:
                return False
            i = self._next
            old = self.keys[i]
            if old is not None:
                self.index.pop(old, None)
            for name, store in self.data.items():
                store[i] = fields[name]
            self.keys[i], self.index[key] = key, i
            self._next = (i + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.added += 1
            return True

    def sample(self, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``batch`` experiences drawn uniformly (copies, safe to use outside the lock)."""
        with self._lock:
            index = rng.integers(self.size, size=batch)
            return {name: store[index].copy() for name, store in self.data.items()}


class TrainerThread:
    """Runs ``step`` (one training step) and ``publish`` on its own thread, or inline."""

    def __init__(
        self,
        step: Callable[[], float | None],
        publish: Callable[[], None],
        *,
        synchronous: bool,
    ) -> None:
        self.step, self.publish, self.synchronous = step, publish, synchronous
        self.steps = 0
        self.losses: list[float] = []
        self._due = 0
        self._copy = False
        self._stop = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        if self.synchronous or self._thread is not None:
            return
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="kale-agent-trainer", daemon=True)
        self._thread.start()

    def request(self, *, steps: int = 0, copy_weights: bool = False) -> None:
        """Ask for ``steps`` more training steps and/or a weight copy (never blocks long)."""
        if self.synchronous:
            for _ in range(steps):
                self._one()
            if copy_weights:
                self.publish()
            return
        with self._cond:
            self._due = min(self._due + steps, 1)  # no backlog: one step on the latest data
            self._copy = self._copy or copy_weights
            self._cond.notify()

    def _one(self) -> None:
        loss = self.step()
        if loss is not None:
            self.steps += 1
            self.losses.append(loss)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._stop or self._due or self._copy):
                        self._cond.wait()
                    if self._stop:
                        return
                    due, self._due = self._due, 0
                    copy_now, self._copy = self._copy, False
                for _ in range(due):
                    self._one()
                if copy_now:
                    self.publish()
        except BaseException as exc:  # surfaced to the deciding thread by stop()
            self.error = exc

    def stop(self, *, drain: bool = True) -> None:
        """Finish the requested work (``drain``) and end the thread; re-raise its error."""
        thread = self._thread
        if thread is not None:
            if drain:
                with self._cond:
                    pending = self._due or self._copy
                while pending and thread.is_alive():
                    thread.join(0.01)
                    with self._cond:
                        pending = self._due or self._copy
            with self._cond:
                self._stop = True
                self._cond.notify()
            thread.join()
            self._thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def no_grad_forward(net: nn.Module, *args: torch.Tensor) -> torch.Tensor:
    """``net(*args)`` without autograd (inference on a snapshot)."""
    with torch.inference_mode():
        out: torch.Tensor = net(*args)
    return out
