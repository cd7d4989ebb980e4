"""Parameter servers and their clients over ``torch.distributed`` point-to-point (gloo).

Why this module exists: it is the PS architecture the throughput model describes. A PS
holds its blocks and their Adagrad state (:class:`ShardState`, pure tensor math); workers
pull the embedding rows their batch touches plus the dense layers, and push gradients back
(:class:`PSClient`); the server loop (:func:`serve`) answers them.

Wire protocol (world = p PS ranks ``0..p-1`` then w worker ranks ``p..p+w-1``; every
message is a tensor, sizes are known from the header or from the layout)::

    worker → PS  header int64[8] (tag REQ): op, step, n_idx, n_float, stop, count, 0, 0
    PULL   → PS  idx int64[n_idx] (tag IDX): unique-id counts of the PS's tables, then ids
           ← PS  float32 (tag DATA): the rows of those ids, then the PS's dense blocks
    PUSH   → PS  float32[n_float] (tag GRAD): gradients in the same layout as the last PULL
           ← PS  ack int64[2] (tag ACK): stop_all, step
    DONE   → PS  (header only): this worker has left; the PS saves when all have

The PS receives headers from *any* source (gloo's recv-from-any), so one thread serves every
worker in arrival order. Gradients are gradients of the *summed* loss with the sample
``count``: the PS divides by the samples of the step, so a sync step averages over the whole
global batch however it was split. **Sync**: the PS waits for one PUSH (possibly empty) from
every worker, applies the averaged gradient once and acks them all; the ack carries
``stop_all`` (any worker asked to stop this step), so all workers leave after the same step.
**Async**: each PUSH is applied on arrival and acked at once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed as dist

from trainer.model import Block, ModelSpec, init_block, owned_blocks

OP_PULL, OP_PUSH, OP_DONE = 1, 2, 3
TAG_REQ, TAG_IDX, TAG_DATA, TAG_GRAD, TAG_ACK = 11, 12, 13, 14, 15
HEADER = 8

Mode = Literal["sync", "async"]


# ----------------------------------------------------------------------------- shard state


@dataclass
class _Slot:
    block: Block
    param: torch.Tensor
    accum: torch.Tensor


class ShardState:
    """The blocks one PS owns, with Adagrad accumulators; pulls and sparse updates."""

    def __init__(self, spec: ModelSpec, ps_index: int, ps: int) -> None:
        self.spec = spec
        self.blocks = owned_blocks(spec, ps_index, ps)
        self.slots = {
            b.index: _Slot(b, init_block(spec, b), torch.zeros(init_block_shape(b)))
            for b in self.blocks
        }
        self.tables = [b for b in self.blocks if b.kind == "embedding"]
        self.dense = [b for b in self.blocks if b.kind == "dense"]
        self.dense_numel = sum(b.numel for b in self.dense)
        self.updates = 0

    # -- layout ----------------------------------------------------------------------------

    def reply_size(self, counts: list[int]) -> int:
        """Floats in a PULL reply (and a PUSH) for ``counts`` unique ids per owned table."""
        return sum(counts) * self.spec.dim + self.dense_numel

    def gather(self, ids: list[torch.Tensor]) -> torch.Tensor:
        """The rows of ``ids`` (one tensor per owned table) then the dense blocks, flat."""
        parts = [
            self.slots[b.index].param[i].reshape(-1) for b, i in zip(self.tables, ids, strict=True)
        ]
        parts += [self.slots[b.index].param for b in self.dense]
        return torch.cat(parts) if parts else torch.zeros(0)

    def split(
        self, ids: list[torch.Tensor], flat: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Cut a flat PUSH payload into per-table row gradients and per-layer gradients."""
        out_rows, out_dense, at = [], [], 0
        for i in ids:
            n = int(i.numel()) * self.spec.dim
            out_rows.append(flat[at : at + n].view(-1, self.spec.dim))
            at += n
        for b in self.dense:
            out_dense.append(flat[at : at + b.numel])
            at += b.numel
        return out_rows, out_dense

    # -- optimizer -------------------------------------------------------------------------

    def apply(
        self,
        ids: list[torch.Tensor],
        row_grads: list[torch.Tensor],
        dense_grads: list[torch.Tensor],
        count: int,
    ) -> None:
        """One Adagrad step with gradients of the summed loss over ``count`` samples.

        ``ids`` must be unique per table (duplicates would be updated twice).
        """
        if count <= 0:
            return
        scale = 1.0 / count
        lr, eps = self.spec.lr, self.spec.eps
        for b, i, g in zip(self.tables, ids, row_grads, strict=True):
            if i.numel() == 0:
                continue
            slot = self.slots[b.index]
            g = g * scale
            acc = slot.accum.index_select(0, i) + g * g
            slot.accum.index_copy_(0, i, acc)
            slot.param.index_add_(0, i, -lr * g / (acc.sqrt() + eps))
        for b, g in zip(self.dense, dense_grads, strict=True):
            slot = self.slots[b.index]
            g = g * scale
            slot.accum.add_(g * g)
            slot.param.add_(-lr * g / (slot.accum.sqrt() + eps))
        self.updates += 1

    # -- checkpoint ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": "kale.ckpt-shard/v1",
            "spec": self.spec.to_dict(),
            "updates": self.updates,
            "blocks": {idx: {"param": s.param, "accum": s.accum} for idx, s in self.slots.items()},
        }

    def load_blocks(self, blocks: dict[int, dict[str, torch.Tensor]]) -> None:
        """Replace owned blocks by saved ones (shapes must match)."""
        for idx, saved in blocks.items():
            slot = self.slots.get(int(idx))
            if slot is None:
                continue
            if saved["param"].shape != slot.param.shape:
                raise ValueError(
                    f"checkpoint block {slot.block.name} has shape {tuple(saved['param'].shape)}, "
                    f"the model needs {tuple(slot.param.shape)}"
                )
            slot.param = saved["param"].clone()
            slot.accum = saved["accum"].clone()


def init_block_shape(block: Block) -> tuple[int, ...]:
    return block.shape if block.kind == "embedding" else (block.numel,)


class SyncAccumulator:
    """Sums the PUSHes of one synchronous step (sparse rows merged per table)."""

    def __init__(self, state: ShardState) -> None:
        self.state = state
        self.reset()

    def reset(self) -> None:
        self.ids: list[list[torch.Tensor]] = [[] for _ in self.state.tables]
        self.rows: list[list[torch.Tensor]] = [[] for _ in self.state.tables]
        self.dense = [torch.zeros(b.numel) for b in self.state.dense]
        self.count = 0
        self.pushes = 0
        self.stop = False

    def add(
        self,
        ids: list[torch.Tensor],
        row_grads: list[torch.Tensor],
        dense_grads: list[torch.Tensor],
        count: int,
        stop: bool,
    ) -> None:
        self.pushes += 1
        self.stop = self.stop or stop
        if count <= 0:
            return
        self.count += count
        for t, (i, g) in enumerate(zip(ids, row_grads, strict=True)):
            self.ids[t].append(i)
            self.rows[t].append(g)
        for acc, g in zip(self.dense, dense_grads, strict=True):
            acc.add_(g)

    def apply(self) -> None:
        if self.count <= 0:
            return
        merged_ids, merged_rows = [], []
        for ids, rows in zip(self.ids, self.rows, strict=True):
            if not ids:
                merged_ids.append(torch.zeros(0, dtype=torch.int64))
                merged_rows.append(torch.zeros(0, self.state.spec.dim))
                continue
            cat_ids = torch.cat(ids)
            uniq, inverse = torch.unique(cat_ids, return_inverse=True)
            summed = torch.zeros(len(uniq), self.state.spec.dim)
            summed.index_add_(0, inverse, torch.cat(rows))
            merged_ids.append(uniq)
            merged_rows.append(summed)
        self.state.apply(merged_ids, merged_rows, self.dense, self.count)


# ----------------------------------------------------------------------------- server loop


@dataclass
class ServeStats:
    """What a PS did while serving (reported when it saves)."""

    pulls: int = 0
    pushes: int = 0
    steps: int = 0
    samples: int = 0
    busy_s: float = 0.0
    done: set[int] = field(default_factory=set)


def serve(
    state: ShardState,
    *,
    mode: Mode,
    worker_ranks: list[int],
    on_step: Callable[[ServeStats], None] | None = None,
) -> ServeStats:
    """Answer PULL/PUSH/DONE until every worker has sent DONE (runs in the PS process)."""
    stats = ServeStats()
    last_ids: dict[int, list[torch.Tensor]] = {}
    accumulator = SyncAccumulator(state)
    waiting: list[int] = []  # sync: workers whose PUSH of the current step arrived
    sends: deque[Any] = deque()  # outstanding isend works (their tensors must stay alive)
    expected = set(worker_ranks)
    header = torch.zeros(HEADER, dtype=torch.int64)
    step = 0

    def send(tensor: torch.Tensor, dst: int, tag: int) -> None:
        sends.append((dist.isend(tensor, dst=dst, tag=tag), tensor))
        while sends and sends[0][0].is_completed():
            sends.popleft()

    while stats.done != expected:
        src = dist.recv(header, tag=TAG_REQ)
        began = time.perf_counter()
        op, n_idx, n_float, stop, count = (int(header[k]) for k in (0, 2, 3, 4, 5))
        if op == OP_PULL:
            idx = torch.empty(n_idx, dtype=torch.int64)
            dist.recv(idx, src=src, tag=TAG_IDX)
            n_tables = len(state.tables)
            counts = idx[:n_tables].tolist()
            ids = list(torch.split(idx[n_tables:], counts)) if n_tables else []
            last_ids[src] = ids
            send(state.gather(ids), src, TAG_DATA)
            stats.pulls += 1
        elif op == OP_PUSH:
            ids = last_ids.pop(src, [torch.zeros(0, dtype=torch.int64) for _ in state.tables])
            grads = torch.empty(n_float)
            if n_float:
                dist.recv(grads, src=src, tag=TAG_GRAD)
            rows, dense = state.split(ids, grads) if n_float else ([], [])
            if not n_float:
                count = 0
            stats.pushes += 1
            stats.samples += max(count, 0)
            if mode == "async":
                if count > 0:
                    state.apply(ids, rows, dense, count)
                step += 1
                send(torch.tensor([0, step], dtype=torch.int64), src, TAG_ACK)
            else:
                if count > 0:
                    accumulator.add(ids, rows, dense, count, bool(stop))
                else:
                    accumulator.add([], [], [], 0, bool(stop))
                waiting.append(src)
                if len(waiting) == len(expected - stats.done):
                    accumulator.apply()
                    step += 1
                    ack = torch.tensor([int(accumulator.stop), step], dtype=torch.int64)
                    for dst in waiting:
                        send(ack.clone(), dst, TAG_ACK)
                    waiting.clear()
                    accumulator.reset()
            stats.steps = step
            if on_step is not None:
                on_step(stats)
        elif op == OP_DONE:
            stats.done.add(src)
        else:  # pragma: no cover - a protocol bug, not a user error
            raise RuntimeError(f"PS got unknown op {op} from rank {src}")
        stats.busy_s += time.perf_counter() - began
    for work, _tensor in sends:
        work.wait()
    return stats


# ----------------------------------------------------------------------------- client


class PSClient:
    """A worker's view of the PS group: pull rows and dense layers, push gradients."""

    def __init__(self, spec: ModelSpec, ps: int) -> None:
        self.spec = spec
        self.ps = ps
        self.layouts = [
            (
                [b for b in owned_blocks(spec, r, ps) if b.kind == "embedding"],
                [b for b in owned_blocks(spec, r, ps) if b.kind == "dense"],
            )
            for r in range(ps)
        ]
        self._pulled: list[list[int]] = [[] for _ in range(ps)]
        self.step = 0

    def pull(self, uniq: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Rows of ``uniq[f]`` for every field and every dense layer, from their owners."""
        works, keep = [], []
        for r, (tables, _dense) in enumerate(self.layouts):
            ids = [uniq[b.index] for b in tables]
            counts = [int(i.numel()) for i in ids]
            idx = torch.cat([torch.tensor(counts, dtype=torch.int64), *ids])
            header = torch.tensor([OP_PULL, self.step, idx.numel(), 0, 0, 0, 0, 0])
            works.append(dist.isend(header, dst=r, tag=TAG_REQ))
            works.append(dist.isend(idx, dst=r, tag=TAG_IDX))
            keep += [header, idx]
            self._pulled[r] = counts
        rows: list[torch.Tensor | None] = [None] * self.spec.fields
        dense: list[torch.Tensor | None] = [None] * (self.spec.n_blocks - self.spec.fields)
        for r, (tables, dense_blocks) in enumerate(self.layouts):
            counts = self._pulled[r]
            size = sum(counts) * self.spec.dim + sum(b.numel for b in dense_blocks)
            reply = torch.empty(size)
            dist.recv(reply, src=r, tag=TAG_DATA)
            at = 0
            for b, n in zip(tables, counts, strict=True):
                rows[b.index] = reply[at : at + n * self.spec.dim].view(n, self.spec.dim)
                at += n * self.spec.dim
            for b in dense_blocks:
                dense[b.index - self.spec.fields] = reply[at : at + b.numel]
                at += b.numel
        for w in works:
            if w is not None:  # torch types isend/irecv as Optional (None off the group)
                w.wait()
        return [t for t in rows if t is not None], [t for t in dense if t is not None]

    def push(
        self,
        row_grads: list[torch.Tensor] | None,
        dense_grads: list[torch.Tensor] | None,
        count: int,
        stop: bool,
    ) -> bool:
        """Send gradients (``None``: an empty contribution) to every PS; True if all stop."""
        works, keep = [], []
        for r, (tables, dense_blocks) in enumerate(self.layouts):
            if row_grads is None or dense_grads is None or count <= 0:
                payload = torch.zeros(0)
            else:
                parts = [row_grads[b.index].reshape(-1) for b in tables]
                parts += [dense_grads[b.index - self.spec.fields] for b in dense_blocks]
                payload = torch.cat(parts) if parts else torch.zeros(0)
            n = int(payload.numel())
            header = torch.tensor([OP_PUSH, self.step, 0, n, int(stop), count if n else 0, 0, 0])
            works.append(dist.isend(header, dst=r, tag=TAG_REQ))
            keep.append(header)
            if n:
                works.append(dist.isend(payload, dst=r, tag=TAG_GRAD))
                keep.append(payload)
        stop_all = False
        for r in range(self.ps):
            ack = torch.zeros(2, dtype=torch.int64)
            dist.recv(ack, src=r, tag=TAG_ACK)
            stop_all = stop_all or bool(ack[0])
        for w in works:
            if w is not None:
                w.wait()
        self.step += 1
        return stop_all

    def done(self) -> None:
        """Tell every PS this worker has left (after its last commit)."""
        works, keep = [], []
        for r in range(self.ps):
            header = torch.tensor([OP_DONE, self.step, 0, 0, 0, 0, 0, 0])
            works.append(dist.isend(header, dst=r, tag=TAG_REQ))
            keep.append(header)
        for w in works:
            if w is not None:
                w.wait()
