"""Machinery every learned agent shares: seeding, devices, replay, ε, target sync, checkpoints.

* :func:`configure` — seeds torch and numpy, one CPU thread and
  ``torch.use_deterministic_algorithms(True)``, so a CPU run with the same seed is
  bit-for-bit repeatable; returns the ``torch.device`` (``cpu`` or ``cuda``).
* :class:`ReplayBuffer` — fixed-capacity ring of named numpy fields; the oldest
  transitions are overwritten first (the fault-aware document's "replay stack that drops
  its oldest").
* :class:`EpsilonSchedule` — ε-greedy exploration decaying geometrically per step.
* :func:`sync_target` — copy the online network's weights into its target network.
* :func:`gradient_step` — zero, backpropagate, clip the gradient norm, step: every agent's
  update.
* :class:`TrainingCurve` — one record per episode (return, loss, ε, metrics), saved with
  the weights and plotted by ``kale place train --plot``.
* :func:`save_checkpoint` / :func:`load_checkpoint` — one ``.pt`` file with the agent's
  name, the settings dataclass that made it (as plain values), every network's weights
  and the curve; written atomically, read with ``torch.load(weights_only=True)``. A
  missing, truncated or foreign file is an :class:`AgentFileError` (one line, exit 2).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import tempfile
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from placement.errors import PlacementInputError

FORMAT = "kale-agent/1"
DEVICES = ("cpu", "cuda")
S = TypeVar("S")


class AgentFileError(PlacementInputError):
    """A checkpoint that cannot be read as a Kale agent."""


def configure(seed: int, device: str = "cpu", *, deterministic: bool = True) -> torch.device:
    """Seed everything and make CPU runs deterministic (see the module docstring).

    ``deterministic=False`` skips ``torch.use_deterministic_algorithms`` (its first call
    costs seconds), for agents loaded only to decide: inference here is deterministic on CPU
    anyway."""
    if device not in DEVICES:
        raise PlacementInputError(f"device must be one of {DEVICES}, not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise PlacementInputError("--device cuda: no CUDA device is available here")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    if deterministic:
        enable_determinism(device)
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return torch.device(device)


def enable_determinism(device: str = "cpu") -> None:
    """``torch.use_deterministic_algorithms(True)`` once per process (training needs it)."""
    if not torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(True, warn_only=device == "cuda")


class ReplayBuffer:
    """A ring of transitions stored field by field (numpy, preallocated)."""

    def __init__(self, capacity: int, shapes: dict[str, tuple[tuple[int, ...], Any]]) -> None:
        if capacity < 1:
            raise ValueError("replay capacity must be positive")
        self.capacity = capacity
        self.data = {k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in shapes.items()}
        self.size = 0
        self._next = 0

    def __len__(self) -> int:
        return self.size

    def add(self, **fields: Any) -> None:
        """Store one transition (every field of the buffer must be given)."""
        i = self._next
        for name, store in self.data.items():
            store[i] = fields[name]
        self._next = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``batch`` transitions drawn uniformly with replacement."""
        index = rng.integers(self.size, size=batch)
        return {name: store[index] for name, store in self.data.items()}


@dataclass(frozen=True)
class EpsilonSchedule:
    """ε(step) = max(end, start · decay^step)."""

    start: float = 1.0
    end: float = 0.02
    decay: float = 0.9995

    def value(self, step: int) -> float:
        return max(self.end, self.start * self.decay**step)


def sync_target(online: nn.Module, target: nn.Module) -> None:
    """Target ← online (the periodic copy of DQN)."""
    target.load_state_dict(online.state_dict())


def gradient_step(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    params: Iterable[torch.Tensor],
    *,
    max_norm: float,
) -> None:
    """One optimiser step on ``loss`` with the gradient norm of ``params`` clipped.

    ``torch.autograd.backward(loss)`` is what ``loss.backward()`` calls; the function is
    annotated, the method is not (strict mypy refuses the untyped call)."""
    optimizer.zero_grad()
    torch.autograd.backward(loss)
    nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()


def mlp(sizes: Iterable[int]) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    widths = list(sizes)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass
class TrainingCurve:
    """Per-episode records: ``{"episode", "return", "loss", "epsilon", ...metrics}``."""

    records: list[dict[str, float | int]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, **record: float) -> None:
        self.records.append({k: v if isinstance(v, int) else float(v) for k, v in record.items()})

    def as_dict(self) -> dict[str, Any]:
        return {"records": self.records, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainingCurve:
        """The inverse of :meth:`as_dict` (an agent file without a curve gives an empty one)."""
        return cls(list(values.get("records", [])), float(values.get("seconds", 0)))


def settings_to_dict(settings: Any) -> dict[str, Any]:
    """A settings dataclass as plain values (tuples become lists)."""
    return dataclasses.asdict(settings)


def settings_from_dict(cls: type[S], values: dict[str, Any]) -> S:
    """Rebuild a (nested) settings dataclass from :func:`settings_to_dict`'s output."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(values) - names
    if unknown:
        raise AgentFileError(f"unknown setting(s) {sorted(unknown)} for {cls.__name__}")
    for name, value in values.items():
        kind = hints[name]
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = settings_from_dict(kind, value)  # type: ignore[arg-type]
        elif _is_tuple(kind) and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def _is_tuple(kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return any(_is_tuple(k) for k in typing.get_args(kind))
    return origin is tuple or kind is tuple


def save_checkpoint(
    path: str | Path,
    *,
    agent: str,
    settings: Any,
    networks: dict[str, nn.Module],
    curve: TrainingCurve,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the agent atomically (temporary file in the same folder, then rename)."""
    target = Path(path)
    payload = {
        "format": FORMAT,
        "agent": agent,
        "settings": settings_to_dict(settings),
        "networks": {
            name: {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
            for name, net in networks.items()
        },
        "curve": curve.as_dict(),
        "extra": extra or {},
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint's payload; any unreadable or foreign file is an :class:`AgentFileError`."""
    where = str(path)
    if not Path(path).is_file():
        raise AgentFileError("no such agent file", path=where)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt or foreign file
        raise AgentFileError(
            f"not a readable agent file (torch.load failed: {type(exc).__name__})", path=where
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise AgentFileError(f"not a Kale agent file (expected format {FORMAT})", path=where)
    for key in ("agent", "settings", "networks"):
        if key not in payload:
            raise AgentFileError(f"agent file lacks {key!r}", path=where)
    return payload


def load_weights(net: nn.Module, state: Any, *, path: str, name: str) -> None:
    """Load ``state`` into ``net``; a shape or key mismatch is an :class:`AgentFileError`."""
    try:
        net.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise AgentFileError(f"network {name!r} does not match: {first[:120]}", path=path) from None
