"""``async_transformer`` (seed 003) as a node score plugin: how the agent's one chosen
candidate becomes scores the placer ranks, and how each placement's data access comes back
to it as the document's reward (``placement.agents.async_transformer``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from placement.agents.async_transformer_net import NAME
from placement.cluster import Cluster
from placement.env.locality_features import candidate_tokens
from placement.locality import Access, DataCaches
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy

if TYPE_CHECKING:
    from placement.agents.async_transformer import AsyncTransformerAgent


class AsyncTransformerPolicy(ScorePolicy):
    """The agent as a node score plugin: the chosen candidate scores highest, the other
    candidates by their Q rank, every other feasible node 0."""

    name = NAME
    uses_locality = True

    def __init__(
        self,
        agent: AsyncTransformerAgent,
        context: PolicyContext | None = None,
        *,
        explore: bool = False,
        learn: bool = False,
    ) -> None:
        self.agent, self.explore, self.learn = agent, explore, learn
        self.caches: DataCaches | None = None
        self._cluster: Cluster | None = None

    def observe_locality(self, caches: DataCaches) -> None:
        self.caches = caches

    def observe_access(self, pod: Pod, node: int, access: Access) -> None:
        if self.learn and self._cluster is not None:
            c = self._cluster
            util = c.allocated_gpu_milli / max(c.total_gpu_milli, 1)
            self.agent.observe_reward(self.agent.reward(access, util))

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        wall, cpu = time.perf_counter(), time.thread_time()
        self._cluster = cluster
        cands = candidate_tokens(pod, cluster, nodes, self.caches, slots=self.agent.settings.slots)
        index, q = self.agent.decide(cands, explore=self.explore, learn=self.learn)
        self.agent.latency_s.append(time.perf_counter() - wall)
        self.agent.cpu_s.append(time.thread_time() - cpu)
        order = np.argsort(nodes, kind="stable")
        position = order[np.searchsorted(nodes[order], cands.nodes)]
        scores = np.zeros(len(nodes), np.int64)
        scores[position] = np.unique(q, return_inverse=True)[1].reshape(-1) + 1
        scores[position[index]] = scores.max() + 1
        return scores
