"""The simulators as gymnasium-style environments, shared by every learned agent.

* :class:`NodePlacementEnv` — node level: where each arriving pod lands (inflation or timed
  arrivals on a ``placement.cluster.Cluster``), one feature row per feasible node.
* :class:`QueueEnv` — queue level: which job of a ranked window starts or is reserved, and
  which backfills, on the RLScheduler simulator.

No torch here: agents live in ``placement.agents``.
"""

from placement.env.base import Env, FeatureSpec, InvalidActionError
from placement.env.node_env import NodeEnvSettings, NodeObservation, NodePlacementEnv
from placement.env.queue_env import QueueEnv, QueueEnvSettings, QueueObservation

__all__ = [
    "Env",
    "FeatureSpec",
    "InvalidActionError",
    "NodeEnvSettings",
    "NodeObservation",
    "NodePlacementEnv",
    "QueueEnv",
    "QueueEnvSettings",
    "QueueObservation",
]
