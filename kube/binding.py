"""What became of a Binding or an Eviction, kept free of the ``kubernetes`` import (like
:mod:`.errors`) so the scheduler's core can read outcomes without loading the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BindStatus = Literal["bound", "elsewhere", "gone", "failed"]
EvictStatus = Literal["evicted", "gone", "blocked", "failed"]


@dataclass(frozen=True)
class BindOutcome:
    """``bound``: this Binding bound the pod. ``elsewhere``: the pod is bound to ``node``
    (an earlier attempt whose answer was lost, or another scheduler). ``gone``: the pod was
    deleted or replaced. ``failed``: not bound; try again later (``message`` says why)."""

    status: BindStatus
    node: str | None = None
    gpus: tuple[int, ...] | None = None
    message: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    """``elsewhere``: the bound pod's annotations (its GPU assignment, whoever wrote it)."""


@dataclass(frozen=True)
class EvictOutcome:
    """``evicted``: the API server accepted the Eviction (the pod terminates gracefully).
    ``gone``: the pod no longer exists. ``blocked``: a PodDisruptionBudget forbids it now
    (HTTP 429 naming the budget). ``failed``: anything else (``message`` says what)."""

    status: EvictStatus
    message: str = ""
