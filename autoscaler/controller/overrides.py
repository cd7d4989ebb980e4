"""How the loop honours a pause or a pin (:mod:`autoscaler.job.overrides` says which holds).

Kept out of the loop and the act stage so that the rules read in one place:

* a **paused** job is never resized — not by the planner, not by an unfinished resize (its
  marker waits for the unpause), not by a pin;
* a **pinned** job is held at its pinned size: the planner is not asked, an unfinished
  resize rolls forward to the pin, and the pin is applied even while Kafka cannot be
  measured (it needs no metrics); the GPU quota still approves it like any other wish;
* either way the job carries a ``Paused`` condition (True, with the reason and the source);
  once the override is lifted it turns False and the planner takes over at that tick.
"""

from __future__ import annotations

from autoscaler.actuators.base import Size
from autoscaler.controller.status import Conditions
from autoscaler.job.overrides import Override
from autoscaler.policy.types import Decision, JobSizing


def pinned_decision(override: Override, current: Size, sizing: JobSizing) -> Decision:
    """The plan of a paused job (its current size) or a pinned one (the pin)."""
    if override.kind == "paused" or override.workers is None:
        return Decision(current.workers, current.ps, {"action": "paused", "why": override.why})
    workers = override.workers
    return Decision(
        workers,
        sizing.ps_for(workers),
        {"action": "pinned", "why": override.why, "source": override.source},
    )


def mark(cond: Conditions, override: Override | None) -> None:
    """Set (or lift) the ``Paused`` condition; a job never paused carries none."""
    if override is not None:
        cond.set("Paused", True, override.reason, override.why)
    elif "Paused" in cond.by_type:
        cond.set("Paused", False, "Resumed", "the planner sizes the job again")


def is_paused(override: Override | None) -> bool:
    return override is not None and override.kind == "paused"


def is_pinned(override: Override | None) -> bool:
    return override is not None and override.kind == "pinned"
