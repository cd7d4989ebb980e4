"""Policy names → constructors; the CLI, the benchmark and the simulators build from here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from placement.agent_names import is_agent, parse_agent_name, split_policy_list
from placement.errors import PlacementInputError
from placement.policies.base import PolicyContext, ScorePolicy
from placement.policies.fault_aware import FaultAwareBestFitPolicy
from placement.policies.fgd import FGDPolicy
from placement.policies.gpu_aware import GpuClusteringPolicy, GpuPackingPolicy
from placement.policies.guard import GuardedPolicy
from placement.policies.simple import BestFitPolicy, DotProductPolicy, RandomPolicy

POLICIES: dict[str, Callable[[PolicyContext], ScorePolicy]] = {
    "random": RandomPolicy,
    "dotprod": DotProductPolicy,
    "clustering": GpuClusteringPolicy,
    "packing": GpuPackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FGDPolicy,
    "fault-bestfit": FaultAwareBestFitPolicy,
}
"""The published comparison's policies in its order (weakest first), then Kale's own."""

PUBLISHED = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd")
"""The six of the inflation experiment (what ``kale place simulate`` compares by default)."""

NEEDS_TYPICAL = frozenset({"fgd"})
AGENT_LOADER = "placement.agents:node_policy"
"""What turns ``agent:PATH`` into a policy, as ``module:function``: named, not imported,
because the agents build on this package's interfaces (and bring torch, which the heuristics
must not load)."""


def _check_agent_name(name: str) -> None:
    """``agent:PATH[,fallback=RULE]`` is well formed and RULE is a known policy."""
    fallback = parse_agent_name(name).fallback
    if fallback is not None and fallback not in POLICIES:
        raise PlacementInputError(
            f"{name!r}: unknown fallback policy {fallback!r}; known: {', '.join(POLICIES)}"
        )


def parse_policy_names(text: str) -> list[str]:
    """``"bestfit,fgd"`` → ``["bestfit", "fgd"]``; an unknown or repeated name is an error.

    An agent's options stay with it: ``"bestfit,agent:a.pt,fallback=fgd"`` is two names
    (``placement.agent_names``)."""
    names = split_policy_list(text)
    if not names:
        raise PlacementInputError(f"no policy named; known: {', '.join(POLICIES)}")
    for name in names:
        if is_agent(name):
            _check_agent_name(name)
        elif name not in POLICIES:
            raise PlacementInputError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    if len(set(names)) != len(names):
        raise PlacementInputError(f"a policy is named twice in {text!r}")
    return names


def make_policy(name: str, context: PolicyContext | None = None) -> ScorePolicy:
    """A fresh policy; ``context`` supplies the random generator and typical pods.

    ``agent:PATH`` loads a saved node-level agent (torch is imported only then);
    ``agent:PATH,fallback=RULE`` puts it behind the guard (``placement.policies.guard``)."""
    context = context or PolicyContext()
    if is_agent(name):
        _check_agent_name(name)
        spec = parse_agent_name(name)
        agent: ScorePolicy = _agent_loader()(spec.path, context)
        if spec.fallback is None:
            return agent
        return GuardedPolicy(agent, POLICIES[spec.fallback](context), label=spec.text)
    factory = POLICIES.get(name)
    if factory is None:
        raise PlacementInputError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return factory(context)


def _agent_loader() -> Callable[..., Any]:
    module, attr = AGENT_LOADER.split(":")
    loader: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return loader
