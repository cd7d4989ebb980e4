"""Planning policies: pure ``decide(observation, state) -> Decision`` functions.

The same policy objects run in the simulator, in local mode and on the cluster; they see only
the past (the observation) and their own JSON-able state, and never do I/O.
"""

from autoscaler.policy.types import Decision, JobSizing, Observation, Policy

__all__ = ["Decision", "JobSizing", "Observation", "Policy"]
