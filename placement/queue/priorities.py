"""RLScheduler's five baseline priorities (Zhang et al., SC'20, ``DIR-LAB/deep-batch-scheduler``).

Each is the formula of the paper that introduced it, in the form RLScheduler evaluates it
(lower key = starts sooner), with n = the job's size, r = its run-time estimate, s = its
submit time and w = how long it has waited now:

* FCFS: s.
* SJF: r, then s (shortest estimate first, earlier submit on ties).
* WFP3 (Tang et al., 2009): −(w / r)³ · n — large jobs that have waited long relative to
  their length go first.
* UNICEP (Tang et al., 2009): −w / (log₂(n) · r).
* F1 (Carastan-Santos & de Camargo, SC'17): log₁₀(r) · n + 870 · log₁₀(s), with the log's
  *absolute* submit time (as RLScheduler uses it; the s term therefore weighs less late in a
  log) and 0.1 in place of a non-positive r or s.

RLScheduler's published WFP3 and UNICEP columns used w = −(s + 1) (the job's start time was
still −1 when the priority was computed); here w is the real wait. For a one-processor job
log₂(n) = 0, which RLScheduler turns into a huge priority with a 1e-15 guard; the same guard
is kept (one-processor jobs that have waited go first under UNICEP).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from placement.agent_names import is_agent, parse_agent_name, split_policy_list
from placement.errors import PlacementInputError
from placement.queue.base import QueuePolicy, QueueView
from placement.queue.guard import GuardedQueuePolicy

_TINY = 1e-15


def _positive(values: np.ndarray, floor: float) -> np.ndarray:
    """Estimates of 0 (some real logs request 0 s) would divide by zero; floor them."""
    return np.maximum(values.astype(np.float64), floor)


@dataclass(frozen=True)
class Fcfs:
    """First come, first served."""

    name: str = "fcfs"

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        return (view.submit_s,)


@dataclass(frozen=True)
class Sjf:
    """Shortest (estimated) job first."""

    name: str = "sjf"

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        return (view.estimate_s, view.submit_s)


@dataclass(frozen=True)
class Wfp3:
    """WFP3: favour big jobs that have waited long for their length."""

    name: str = "wfp3"

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        ratio = view.wait_s / _positive(view.estimate_s, 1.0)
        return (-np.power(ratio, 3) * view.size,)


@dataclass(frozen=True)
class Unicep:
    """UNICEP: wait over (log₂ size × estimate)."""

    name: str = "unicep"

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        log_size = np.log2(np.maximum(view.size.astype(np.float64), 0.0) + _TINY)
        denom = np.maximum(log_size, _TINY) * _positive(view.estimate_s, 1.0)
        return (-(view.wait_s + _TINY) / denom,)


@dataclass(frozen=True)
class F1:
    """F1: the best of the nonlinear functions fitted by simulation in SC'17."""

    name: str = "f1"

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        r = np.where(view.estimate_s > 0, view.estimate_s, 0.1).astype(np.float64)
        s = np.where(view.submit_s > 0, view.submit_s, 0.1).astype(np.float64)
        return (np.log10(r) * view.size + 870.0 * np.log10(s),)


QUEUE_POLICIES: dict[str, QueuePolicy] = {
    p.name: p for p in (Fcfs(), Sjf(), Wfp3(), Unicep(), F1())
}
"""Every queue policy by its CLI name."""

AGENT_LOADER = "placement.agents:queue_policy"
"""What turns ``agent:PATH`` into a queue policy, as ``module:function``: named, not imported,
because the agents build on this package's interfaces (and bring torch)."""


def queue_policy(name: str) -> QueuePolicy:
    """The policy called ``name``; an unknown name is a user error listing the known ones.

    ``agent:PATH`` loads a saved queue-level agent (``placement.agents``; torch only then);
    ``agent:PATH,fallback=RULE`` puts it behind the guard (``placement.queue.guard``)."""
    if is_agent(name):
        spec = parse_agent_name(name)
        rule = _heuristic(spec.fallback) if spec.fallback is not None else None
        module, attr = AGENT_LOADER.split(":")
        load_queue_agent = getattr(importlib.import_module(module), attr)
        label = name.strip() if rule is None else spec.text
        policy: QueuePolicy = load_queue_agent(spec.path, label=label)
        if rule is None:
            return policy
        return GuardedQueuePolicy(policy, rule, label=label)
    return _heuristic(name)


def _heuristic(name: str) -> QueuePolicy:
    try:
        return QUEUE_POLICIES[name.strip().lower()]
    except KeyError:
        known = ", ".join(QUEUE_POLICIES)
        raise PlacementInputError(f"unknown queue policy {name!r} (known: {known})") from None


def parse_queue_policies(names: str) -> list[QueuePolicy]:
    """``"fcfs,sjf,f1"`` → the policies, in order, each once (an agent's options stay with
    it: ``"sjf,agent:q.pt,fallback=sjf"`` is two policies)."""
    policies: list[QueuePolicy] = []
    for part in split_policy_list(names):
        policy = queue_policy(part)
        if policy not in policies:
            policies.append(policy)
    if not policies:
        raise PlacementInputError("no queue policy named (e.g. --queue fcfs,sjf,f1)")
    return policies
