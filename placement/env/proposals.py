"""The rules' proposals: the few nodes each heuristic would pick, as an agent's action set.

A learned placement that must never do worse than a rule had better be able to *be* that
rule. Here the agent does not choose among all feasible nodes: it chooses among the top
``top`` nodes of each rule (BestFit, FGD, GpuPacking, or any score policies given), ordered
as the rule orders them — by score, ties by the placer's tie order, so each rule's first
proposal is exactly the node that rule would take. Each candidate carries what the rules
know about it: each rule's score (FGD's also unrounded, as its fragmentation gain), whether
it is the rule's pick, and its place in the rule's list. With those inputs a network can
follow the best rule for the state, and deviate where it learned better.

Everything here is numpy over the feasible nodes (the rules' own vectorised scores) plus a
sort per rule; the candidate set has at most ``top × rules`` nodes whatever the cluster size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from placement.cluster import Cluster
from placement.frag import TypicalPods
from placement.pod import Pod
from placement.policies.base import MAX_SCORE, PolicyContext, ScorePolicy
from placement.policies.fgd import FGDPolicy, squash
from placement.policies.gpu_aware import GpuPackingPolicy
from placement.policies.simple import BestFitPolicy

GAIN_NORM = 8_000.0
"""FGD's fragmentation gain is divided by this (a node's GPU milli) and clipped to ±1."""


def rule_feature_names(rules: tuple[str, ...], *, gains: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The candidate features :meth:`Proposer.propose` writes, in order."""
    return (
        *(f"{r}_score" for r in rules),
        *(f"{r}_gain" for r in gains),
        *(f"{r}_pick" for r in rules),
        *(f"{r}_place" for r in rules),
    )


@dataclass(frozen=True)
class Proposals:
    """One decision's candidates: node indices, their rule features, each rule's pick."""

    nodes: np.ndarray
    """Candidate node indices, each once, in the order the rules first proposed them."""
    features: np.ndarray
    """``[len(nodes), len(feature names)]`` float32."""
    picks: dict[str, int]
    """Rule name → index into ``nodes`` of the node that rule would take."""


class Proposer:
    """Asks each rule for its top nodes (module docstring)."""

    def __init__(
        self, rules: Mapping[str, ScorePolicy], *, top: int = 4, gpu_rule: str | None = None
    ) -> None:
        if top < 1 or not rules:
            raise ValueError("a proposer needs rules and at least one proposal per rule")
        self.rules = dict(rules)
        self.gpu_rule = self.rules[gpu_rule or next(iter(self.rules))]
        self.names = tuple(self.rules)
        self.top = top
        self.gains = tuple(n for n, p in self.rules.items() if callable(getattr(p, "gains", None)))
        self.feature_names = rule_feature_names(self.names, gains=self.gains)

    def propose(
        self,
        pod: Pod,
        cluster: Cluster,
        nodes: np.ndarray,
        rank: np.ndarray,
        *,
        also: np.ndarray | None = None,
    ) -> Proposals:
        """The candidates among the feasible ``nodes`` (placer's ``rank``: the tie order);
        ``also``: positions in ``nodes`` to add after the rules' lists (another source of
        proposals, described the same way)."""
        scores: dict[str, np.ndarray] = {}
        gains: dict[str, np.ndarray] = {}
        for name, policy in self.rules.items():
            if name in self.gains:  # FGD: its score is its gain, squashed; compute it once
                gains[name] = policy.gains(pod, cluster, nodes)  # type: ignore[attr-defined]
                scores[name] = squash(gains[name])
            else:
                scores[name] = np.asarray(policy.score(pod, cluster, nodes))
        ties = rank[nodes]
        lists = {n: np.lexsort((ties, -scores[n]))[: self.top] for n in self.names}
        slot: dict[int, int] = {}
        for name in self.names:
            for position in lists[name].tolist():
                slot.setdefault(position, len(slot))
        for position in (also if also is not None else np.zeros(0, np.int64)).tolist():
            slot.setdefault(int(position), len(slot))
        chosen = np.fromiter(slot, np.int64, len(slot))
        out = np.zeros((len(chosen), len(self.feature_names)), np.float32)
        column = 0
        for name in self.names:
            out[:, column] = scores[name][chosen] / MAX_SCORE
            column += 1
        for name in self.gains:
            out[:, column] = np.clip(gains[name][chosen] / GAIN_NORM, -1.0, 1.0)
            column += 1
        picks = {n: slot[int(lists[n][0])] for n in self.names}
        for name in self.names:
            out[picks[name], column] = 1.0
            column += 1
        for name in self.names:
            out[:, column] = 1.0  # beyond the rule's list
            for place, position in enumerate(lists[name].tolist()):
                out[slot[position], column] = place / self.top
            column += 1
        return Proposals(nodes[chosen], out, picks)

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        """The GPUs the pod takes on the chosen node: the GPU rule's choice."""
        return self.gpu_rule.choose_gpus(pod, cluster, node)


RULES = ("bestfit", "fgd", "packing")
"""The node rules a placement agent chooses among: the two a user would pick (BestFit, FGD)
and the packing rule, whose proposals differ most from theirs."""
GPU_RULE = "fgd"
"""Whose GPU choice the agent's pods take on the chosen node (FGD's: the sharing GPU that
fragments least; the first free GPUs otherwise), so that following FGD's picks is FGD."""


def default_proposer(typical: TypicalPods, *, top: int) -> Proposer:
    """BestFit, FGD (against ``typical``) and GpuPacking, ``top`` proposals each."""
    context = PolicyContext(typical=typical)
    rules: dict[str, ScorePolicy] = {
        "bestfit": BestFitPolicy(context),
        "fgd": FGDPolicy(context),
        "packing": GpuPackingPolicy(context),
    }
    return Proposer(rules, top=top, gpu_rule=GPU_RULE)


CANDIDATE_RULE_FEATURES = rule_feature_names(RULES, gains=("fgd",))
"""The rule features of :func:`default_proposer`'s candidates."""
