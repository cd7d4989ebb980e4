"""Node-level placement policies: pure score plugins over a cluster snapshot.

``make_policy(name, PolicyContext(rng=..., typical=...))`` builds one of ``POLICIES``
(random, dotprod, clustering, packing, bestfit, fgd); ``placement.placer.place`` runs the
filter → score → tie-break → GPU-choice cycle with it.
"""

from placement.policies.base import PolicyContext, ScorePolicy
from placement.policies.registry import POLICIES, make_policy, parse_policy_names

__all__ = ["POLICIES", "PolicyContext", "ScorePolicy", "make_policy", "parse_policy_names"]
