"""Forking the PS and worker processes of one generation, and what the supervisor knows of each.

Why a module of its own: starting children is the platform-sensitive part of the trainer
(a forkserver with torch preloaded, ``__main__`` hidden so a script is not re-run in the
child, one duplex pipe per child); the supervisor (:mod:`trainer.launcher`) only decides
*when* to start and stop them.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from trainer.config import TrainerConfig, batch_sizes
from trainer.spawn import NodeConfig

Event = dict[str, Any]


@dataclass
class ChildNode:
    """One child process and what its events said so far (guarded by the trainer's lock)."""

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


_CTX: Any = None


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
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


def free_port() -> int:
    """A TCP port for the gloo rendezvous (the OS picks it; kept here rather than taken from
    :mod:`autoscaler.kafka.local.broker`, which would load the Kafka client into the supervisor)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node_configs(
    cfg: TrainerConfig, *, workers: int, ps: int, plan: Any, generation: int, shard: str
) -> list[NodeConfig]:
    """The configs of one generation: ``ps`` PS (restoring ``plan``) then ``workers`` workers."""
    spec = cfg.spec.to_dict()
    sizes = batch_sizes(cfg.mode, cfg.global_batch, workers)
    common: dict[str, Any] = {
        "ps": ps,
        "workers": workers,
        "port": free_port(),
        "mode": cfg.mode,
        "spec": spec,
        "bootstrap": cfg.bootstrap,
        "security": cfg.security,
        "topic": cfg.topic,
        "group": cfg.group,
        "device": cfg.device,
        "generation": generation,
    }
    return [
        NodeConfig(
            role="ps",
            index=i,
            batch=0,
            plan=plan,
            shard_path=str(cfg.checkpoint_dir / f"{shard}-{i}.pt"),
            **common,
        )
        for i in range(ps)
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
        for j in range(workers)
    ]


def run_node(cfg: NodeConfig, conn: Connection) -> None:
    """A child's entry point: run a PS or a worker (:mod:`trainer.node`).

    A trampoline, so that the supervisor names the target without importing torch: the
    forkserver has :mod:`trainer.node` preloaded, so the import here costs nothing there.
    """
    from trainer.node import main

    main(cfg, conn)


def fork_children(configs: list[NodeConfig], *, into: list[ChildNode]) -> None:
    """Start one process per config, appending each to ``into`` as it starts (so the caller
    knows, and can kill, the ones already running when a later start fails)."""
    ctx = _context()
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
            into.append(ChildNode(node_cfg, proc, parent))
