"""The two process bodies of a training job: a parameter server and a worker.

Why this module exists: the supervisor (:mod:`trainer.launcher`) starts ``p`` PS and ``w``
worker processes and only talks to them through one pipe each: the child sends events
(dicts: ``ready``, ``loaded``, ``assignment``, ``step``, ``draining``, ``left``, ``saved``,
``exit``, ``error``) and the supervisor sends ``"stop"`` and ``"leave"``. Everything else
(parameters, gradients) goes over gloo.

Life of a generation:

* every process joins the gloo group (``ready``); PS ranks then restore their blocks from
  the checkpoint plan, if any (``loaded``), and serve until every worker has sent DONE;
  then each PS writes its shard atomically (``saved``) and exits;
* a worker joins the consumer group and steps: take a batch, pull, forward/backward, push,
  **then** commit the batch's offsets, report the step. On ``"stop"`` (or SIGTERM, or the
  supervisor's pipe closing) it finishes the in-flight step, commits, sends DONE to every
  PS, reports ``draining`` (saying whether it leads the consumer group), leaves the group
  on ``"leave"`` (the leader is told first) and exits. In sync mode the stop is agreed
  through the PS acks, so all workers leave after the same step.

Children ignore SIGINT (a Ctrl-C in a terminal reaches the whole process group; the
supervisor decides) and die with the process that started them (PR_SET_PDEATHSIG).

This module is preloaded into the forkserver, so torch and kafka are imported once.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer import checkpoint
from trainer.model import ModelSpec, batch_loss, forward
from trainer.ps import PSClient, ShardState, serve
from trainer.spawn import NodeConfig
from trainer.stream import SampleStream

#: Longest a drained worker waits for the supervisor's "leave" before leaving anyway.
LEAVE_WAIT_S = 15.0


class _Control:
    """Commands from the supervisor: ``"stop"`` (finish the step and drain) and ``"leave"``
    (leave the consumer group now). SIGTERM is a stop; a closed pipe is both."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.stop = False
        self.leave = False
        self.orphaned = False

    def check(self, timeout: float = 0.0) -> None:
        try:
            if self.conn.poll(timeout):
                while True:
                    message = self.conn.recv()
                    self.stop = self.stop or message in ("stop", "leave")
                    self.leave = self.leave or message == "leave"
                    if not self.conn.poll():
                        break
        except (EOFError, OSError):
            self.stop = self.leave = self.orphaned = True

    def poll_stop(self) -> bool:
        self.check()
        return self.stop

    def wait_leave(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.leave and time.monotonic() < deadline:
            self.check(min(0.2, max(0.0, deadline - time.monotonic())))


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _send(conn: Connection, event: str, **fields: Any) -> None:
    with contextlib.suppress(OSError, EOFError):
        conn.send({"event": event, "t": time.monotonic(), **fields})


def _init_group(cfg: NodeConfig) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{cfg.port}",
        rank=cfg.rank,
        world_size=cfg.world,
        timeout=timedelta(seconds=cfg.gloo_timeout_s),
    )


def main(cfg: NodeConfig, conn: Connection) -> None:
    """Process entry point (the target of the supervisor's ``Process``)."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    control = _Control(conn)
    try:
        if cfg.role == "ps":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a PS ends when its workers do
            _run_ps(cfg, conn)
        else:

            def on_term(_sig: int, _frame: Any) -> None:
                # Drain, but leave the group when the supervisor says so (leader first); a
                # worker whose supervisor is gone leaves anyway (closed pipe).
                control.stop = True

            signal.signal(signal.SIGTERM, on_term)
            _run_worker(cfg, conn, control)
    except BaseException as exc:  # report, then die: the supervisor decides what next
        _send(
            conn,
            "error",
            role=cfg.role,
            index=cfg.index,
            message=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=8),
        )
        sys.stderr.flush()
        os._exit(1)
    _send(conn, "exit", role=cfg.role, index=cfg.index)
    conn.close()
    os._exit(0)  # skip interpreter teardown (gloo/kafka threads); everything is flushed


# ----------------------------------------------------------------------------- PS


def _run_ps(cfg: NodeConfig, conn: Connection) -> None:
    spec = ModelSpec.from_dict(cfg.spec)
    _init_group(cfg)
    _send(conn, "ready", role="ps", index=cfg.index)
    began = time.monotonic()
    state = ShardState(spec, cfg.index, cfg.ps)
    if cfg.plan:
        checkpoint.restore(state, cfg.plan)
    _send(
        conn,
        "loaded",
        role="ps",
        index=cfg.index,
        seconds=time.monotonic() - began,
        restored=bool(cfg.plan),
    )
    workers = [cfg.ps + j for j in range(cfg.workers)]
    stats = serve(state, mode=cfg.mode, worker_ranks=workers)  # type: ignore[arg-type]
    began = time.monotonic()
    checkpoint.save_shard(state, Path(cfg.shard_path))
    _send(
        conn,
        "saved",
        role="ps",
        index=cfg.index,
        path=cfg.shard_path,
        blocks=[b.index for b in state.blocks],
        seconds=time.monotonic() - began,
        updates=state.updates,
        pulls=stats.pulls,
        pushes=stats.pushes,
        busy_s=stats.busy_s,
    )
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- worker


def _device(pref: str) -> torch.device:
    if pref == "auto":
        pref = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(pref)


def _run_worker(cfg: NodeConfig, conn: Connection, control: _Control) -> None:
    spec = ModelSpec.from_dict(cfg.spec)
    device = _device(cfg.device)
    _init_group(cfg)
    _send(conn, "ready", role="worker", index=cfg.index, device=str(device))

    def on_assignment(kind: str, partitions: list[int]) -> None:
        _send(conn, "assignment", role="worker", index=cfg.index, kind=kind, partitions=partitions)

    stream = SampleStream(
        cfg.bootstrap,
        cfg.topic,
        cfg.group,
        fields=spec.fields,
        client_id=f"kale-trainer-{cfg.generation}-{cfg.index}",
        session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        check_crcs=cfg.check_crcs,
        on_assignment=on_assignment,
        security=cfg.security,
    )
    client = PSClient(spec, cfg.ps)
    sync = cfg.mode == "sync"
    try:
        while True:
            control.check()
            wants_stop = control.stop
            # Sync: a worker with nothing to read steps (empty) soon, not to stall the others;
            # async: nobody waits for it, so it waits the full batch_wait_s before reporting.
            idle = min(0.05, cfg.batch_wait_s) if sync else cfg.batch_wait_s
            t0 = time.monotonic()
            batch = stream.next_batch(cfg.batch, cfg.batch_wait_s, idle, stop=control.poll_stop)
            t1 = time.monotonic()
            loss_sum = math.nan
            n = batch.samples
            t2 = t3 = t1
            if n:
                pulled = _pull(spec, client, batch)
                t2 = time.monotonic()
                loss_sum, rows_g, dense_g = _backward(spec, pulled, batch, device)
                t3 = time.monotonic()
                stop_all = client.push(rows_g, dense_g, n, wants_stop)
            elif sync:
                stop_all = client.push(None, None, 0, wants_stop)
            else:
                stop_all = False
            if not sync:
                stop_all = wants_stop
            t4 = time.monotonic()
            committed = stream.commit(batch)
            t5 = time.monotonic()
            _send(
                conn,
                "step",
                index=cfg.index,
                n=n,
                records=batch.records,
                skipped=batch.skipped,
                loss=loss_sum,
                ranges=batch.ranges,
                partial=batch.records < cfg.batch,
                committed=committed,
                step=client.step,
                # Where the step's time went: read the stream, pull, forward/backward, push
                # (in sync mode this includes waiting for the slowest worker), commit.
                phases=(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4),
            )
            if stop_all:
                break
    except BaseException:
        stream.close()
        raise
    client.done()  # the PS save once every worker is done
    # Leave the group when told: the supervisor lets the group leader go first (tansu keeps a
    # departed leader as the leader of the next generation when it leaves after a follower).
    _send(conn, "draining", role="worker", index=cfg.index, leader=stream.is_leader)
    control.wait_leave(timeout=LEAVE_WAIT_S)
    stream.close()
    _send(conn, "left", role="worker", index=cfg.index, commit_failures=stream.commit_failures)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def _pull(spec: ModelSpec, client: PSClient, batch: Any) -> tuple[Any, ...]:
    """Unique ids per field, then their rows and the dense layers from the PS."""
    ids = torch.from_numpy(batch.ids) % spec.rows
    uniq, inverse = [], []
    for f in range(spec.fields):
        u, inv = torch.unique(ids[:, f], return_inverse=True)
        uniq.append(u)
        inverse.append(inv)
    rows, dense = client.pull(uniq)
    return rows, dense, torch.stack(inverse, dim=1)


def _backward(
    spec: ModelSpec, pulled: tuple[Any, ...], batch: Any, device: torch.device
) -> tuple[float, list[torch.Tensor], list[torch.Tensor]]:
    """Forward/backward on ``device``; gradients of the summed loss, on the CPU."""
    rows, dense, inverse = pulled
    rows = [r.to(device).requires_grad_(True) for r in rows]
    dense = [d.to(device).requires_grad_(True) for d in dense]
    labels = torch.from_numpy(batch.labels).to(device)
    loss = batch_loss(forward(spec, rows, inverse.to(device), dense), labels)
    loss.backward()
    row_grads = [r.grad.detach().cpu() for r in rows]
    dense_grads = [d.grad.detach().cpu() for d in dense]
    return float(loss.detach()), row_grads, dense_grads
