"""Learned schedulers (the only torch in ``placement``), behind the heuristics' interfaces.

* ``balance_dqn`` — a node score plugin (:class:`~placement.policies.ScorePolicy`);
* ``tr_dqn`` — a queue policy (:class:`~placement.queue.base.QueuePolicy`, with
  ``pick_backfill``);
* ``fault_aware`` — a fault-aware node score plugin (``uses_faults``);
* ``async_transformer`` — a node score plugin that can keep learning online on a
  second thread (``uses_locality`` where the simulator models data caches).

A saved agent is one ``.pt`` file; ``agent:PATH`` works wherever a policy name goes
(``placement.policies.make_policy`` and ``placement.queue.priorities.queue_policy`` call
:func:`node_policy` / :func:`queue_policy` here). Adding an agent = one module with a class
that has ``name``, ``settings_type`` (its settings dataclass, with a ``seed`` and an ``env``),
``train``, ``save``, ``load``/``from_payload`` and ``policy``, plus a line in :data:`AGENTS`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from placement.agents.common import AgentFileError, load_checkpoint

AGENTS: dict[str, tuple[str, str]] = {
    "balance_dqn": ("placement.agents.balance_dqn:BalanceDQN", "node"),
    "tr_dqn": ("placement.agents.tr_dqn:TRDQN", "queue"),
    "fault_aware": ("placement.agents.fault_aware:FaultAwareAgent", "node"),
    "async_transformer": ("placement.agents.async_transformer:AsyncTransformerAgent", "node"),
}
"""Agent name → (``module:class``, the interface it serves: ``node`` or ``queue``)."""


def agent_class(name: str) -> Any:
    """The class of agent ``name`` (imported on first use)."""
    entry = AGENTS.get(name)
    if entry is None:
        from placement.errors import PlacementInputError

        raise PlacementInputError(f"unknown agent {name!r}; known: {', '.join(AGENTS)}")
    module, attr = entry[0].split(":")
    return getattr(importlib.import_module(module), attr)


def load_agent(path: str | Path, *, device: str = "cpu", kind: str | None = None) -> Any:
    """The agent saved at ``path``; ``kind`` (``node``/``queue``) checks what it serves."""
    payload = load_checkpoint(path)
    name = payload["agent"]
    if name not in AGENTS:
        raise AgentFileError(f"unknown agent {name!r} in the file", path=str(path))
    if kind is not None and AGENTS[name][1] != kind:
        raise AgentFileError(
            f"{name} is a {AGENTS[name][1]}-level agent, not a {kind} policy", path=str(path)
        )
    return agent_class(name).from_payload(payload, path=str(path), device=device)


def node_policy(path: str, context: Any = None) -> Any:
    """A saved node-level agent as a score plugin."""
    return load_agent(path, kind="node").policy(context)


def queue_policy(path: str, *, label: str | None = None) -> Any:
    """A saved queue-level agent as a queue policy named ``label`` (default ``agent:PATH``)."""
    return load_agent(path, kind="queue").policy(label or f"agent:{path}")


__all__ = ["AGENTS", "AgentFileError", "agent_class", "load_agent", "node_policy", "queue_policy"]
