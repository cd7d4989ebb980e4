"""Policy names → constructors; the CLI, the benchmark and the simulators build from here."""

from __future__ import annotations

from collections.abc import Callable

from placement.errors import PlacementInputError
from placement.policies.base import PolicyContext, ScorePolicy
from placement.policies.fgd import FGDPolicy
from placement.policies.gpu_aware import GpuClusteringPolicy, GpuPackingPolicy
from placement.policies.simple import BestFitPolicy, DotProductPolicy, RandomPolicy

POLICIES: dict[str, Callable[[PolicyContext], ScorePolicy]] = {
    "random": RandomPolicy,
    "dotprod": DotProductPolicy,
    "clustering": GpuClusteringPolicy,
    "packing": GpuPackingPolicy,
    "bestfit": BestFitPolicy,
    "fgd": FGDPolicy,
}
"""In the order of the published comparison (weakest first)."""

NEEDS_TYPICAL = frozenset({"fgd"})


def parse_policy_names(text: str) -> list[str]:
    """``"bestfit,fgd"`` → ``["bestfit", "fgd"]``; an unknown or repeated name is an error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise PlacementInputError(f"no policy named; known: {', '.join(POLICIES)}")
    for name in names:
        if name not in POLICIES:
            raise PlacementInputError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    if len(set(names)) != len(names):
        raise PlacementInputError(f"a policy is named twice in {text!r}")
    return names


def make_policy(name: str, context: PolicyContext | None = None) -> ScorePolicy:
    """A fresh policy; ``context`` supplies the random generator and typical pods."""
    factory = POLICIES.get(name)
    if factory is None:
        raise PlacementInputError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return factory(context or PolicyContext())
