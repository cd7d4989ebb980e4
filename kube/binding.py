"""What became of a Binding, kept free of the ``kubernetes`` import (like :mod:`.errors`)
so the scheduler's core can read outcomes without loading the client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BindStatus = Literal["bound", "elsewhere", "gone", "failed"]


@dataclass(frozen=True)
class BindOutcome:
    """``bound``: this Binding bound the pod. ``elsewhere``: the pod is bound to ``node``
    (an earlier attempt whose answer was lost, or another scheduler). ``gone``: the pod was
    deleted or replaced. ``failed``: not bound; try again later (``message`` says why)."""

    status: BindStatus
    node: str | None = None
    gpus: tuple[int, ...] | None = None
    message: str = ""
