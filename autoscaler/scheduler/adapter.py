"""Policies by name: ``first-fit`` here, every ``placement/`` policy, and saved agents.

Placeholder until ``placement``'s cluster and policies land on main.
"""

from __future__ import annotations

from autoscaler.scheduler.placers import FirstFit, Placer

BUILTIN = {"first-fit": FirstFit}


def known_policies() -> list[str]:
    return list(BUILTIN)


def check_policy_name(name: str) -> None:
    """Raise ValueError naming the known policies when ``name`` is not one."""
    if name not in BUILTIN:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(known_policies())}")


def make_placer(name: str, *, seed: int = 0, workload: str | None = None) -> Placer:
    check_policy_name(name)
    return BUILTIN[name]()
