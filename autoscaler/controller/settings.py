"""How the controller's loop runs: thread pools, deadlines, the planner's tunables.

Kept apart from the loop and its stages so every stage can take the settings it reads
without importing the loop. What each job wants comes from its job file, and how a
``kale controller`` process is set up comes from ``controller.yaml``
(:mod:`autoscaler.controller.config`), which :mod:`autoscaler.controller.app` turns into
these settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.policy.kale import KaleSettings

Clock = Callable[[], float]
"""Epoch seconds now (``time.time``; a fake clock in tests)."""


@dataclass
class ControllerSettings:
    """How the loop runs (the job files say what each job wants)."""

    interval_s: float = 60.0
    """Time between ticks (the runner's business; here only for messages)."""
    history_s: float = 28 * 86400.0
    """Arrival history handed to the forecaster."""
    reforecast_s: float | None = None
    """Reuse a forecast this long; None: a new forecast whenever the history grew."""
    dry_run: bool = False
    """Read real sizes, apply nothing (every actuator is wrapped in :class:`DryRunActuator`)."""
    observe_threads: int = 1
    """Jobs measured in parallel (1: one after another inside the tick, no deadline — what
    fake-clock tests want; the real controller uses ``meter.threads``)."""
    observe_deadline_s: float | None = None
    """Longest a tick waits for measurements and target reads (None: until all are done).
    A job whose measurement is still running holds its size and is measured again later."""
    act_threads: int = 1
    """Target reads, resize writes and status writes of different jobs run in parallel on
    this many threads (1: one after another inside the tick, no deadline)."""
    act_deadline_s: float | None = None
    """Longest a tick waits for resize and status writes (None: until all are done)."""
    identity: str = ""
    """This replica's name, written to the status."""
    shards: int = 1
    """Shards the jobs are spread over (``controller.yaml``'s ``shards``); a job's shard is
    written to its status and metrics when there is more than one."""
    planner: KaleSettings | None = None
    """Planner tunables (``horizon_steps`` is always set from each job's forecast horizon)."""
    forecast_model: str | None = None
    """The model the forecaster factory uses for every job (None: each job's own)."""
    fit_threads: int = 0
    """Background threads for forecaster fits, shared by all jobs (0: fit inside the tick,
    which keeps a test's ticks deterministic; the real controller uses 1 or more)."""
