"""The demo's closing table: the live run measured, and the simulator on the same replay.

Why this module exists: the demo's point is "Kale against a reactive scaler on the same
traffic". The live Kale run is measured from the controller's own timeline (what the meter
saw each tick), converted to trace time; HPA (and Kale, for reference) are run by the
simulator on exactly the trace segment that was replayed, with the same job, the same
warm-up history and the same forecasting model, under the simulator's semantics
(docs/design.md). The metrics have the same names and units as ``kale simulate --json``.

Live metrics, per controller tick after the replay started (a tick reports the step that
just ended, as the simulator's end-of-step delay does):

* violation rate: share of ticks whose oldest unconsumed age exceeded the SLO;
* cumulative delay: Σ age × (tick gap / interval), in minutes (a late tick counts for the
  steps it covers);
* rescales: resizes applied; downtime: rescales × the rescale duration, which the demo's
  workers honour before consuming again;
* GPU-hours: Σ workers × tick gap (one GPU per worker), plus the old size for the rescale
  duration after a scale-down (a resizing job holds the larger size).

Both of Kale's decisions: the table says *how many* workers each policy ran; a second table
says *where* the simulated policies' workers would land under ``kale scheduler``'s default
placement (FGD on a seeded 64-node cluster of the openb shape, 60 % held by other work:
pending worker-steps, nodes used, GPU allocation share and fragmentation at the end).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common.atomic import atomic_write_text
from common.numbers import format_number
from kale.demo.plan import DAY_S, DemoPlan
from kale.terminal.output import table

METRIC_COLUMNS = (
    ("slo_violation_rate", "violations"),
    ("cumulative_delay_min", "cum_delay_min"),
    ("downtime_min", "downtime_min"),
    ("rescale_count", "rescales"),
    ("gpu_hours", "gpu_hours"),
    ("mean_workers", "mean_workers"),
    ("max_delay_min", "max_delay_min"),
)
SIM_POLICIES = ("kale", "hpa", "keda", "static")
DEMO_PLACEMENT = "fgd"
"""Where the simulated workers land: ``kale scheduler``'s default policy, on the shared
64-node cluster of ``kale simulate --placement`` (about half a second per policy)."""
WHERE_COLUMNS = (
    ("pending_worker_steps", "pending"),
    ("mean_nodes_used", "mean_nodes"),
    ("max_nodes_used", "max_nodes"),
    ("final_gpu_allocation_share", "gpu_share"),
    ("final_fragmentation_share_of_free", "frag_free"),
)


def live_metrics(
    rows: Sequence[dict[str, Any]],
    plan: DemoPlan,
    *,
    wall_origin: float,
    wall_end: float,
    trace_origin: float = 0.0,
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Metrics of the live run from timeline rows (wall time), and its per-tick series (in
    trace time: ``trace_origin`` is the trace time of ``wall_origin``).

    A tick reports the interval since the previous one (the size in force, the age at its
    end), so each row is weighted by the time since the previous row: a late tick counts
    for every step it covers.
    """
    tick = plan.tick_s
    rows = [
        r
        for r in rows
        if wall_origin + tick / 2 <= r["t"] <= wall_end + tick / 2 and r["oldest_age"] is not None
    ]
    if not rows:
        return {"steps": 0}, {"time": [], "workers": [], "delay_min": []}
    t = np.array([r["t"] for r in rows])
    gaps = np.clip(np.diff(np.concatenate([[wall_origin], t])), 0.0, None)
    steps = gaps / tick
    age = np.array([r["oldest_age"] * plan.speedup for r in rows])  # trace seconds
    workers = np.array([r["workers"] or 0 for r in rows], dtype=float)
    resizes = [r for r in rows if r["resized"]]
    # A scale-down holds the old size for the rescale duration (the simulator's rule).
    held_extra = sum(
        max(0, (r["workers"] or 0) - (r.get("desired_workers") or 0))
        for r in resizes
        if r.get("desired_workers") is not None
    )
    gpu_s = float((workers * gaps).sum()) + held_extra * plan.wall(plan.rescale_s)
    metrics = {
        "slo_violation_rate": float(np.count_nonzero(age > plan.slo_s) / len(age)),
        "cumulative_delay_min": float((age * steps).sum() / 60.0),
        "downtime_min": len(resizes) * plan.rescale_s / 60.0,
        "rescale_count": len(resizes),
        "gpu_hours": gpu_s * plan.speedup / 3600.0,
        "mean_workers": float((workers * gaps).sum() / max(gaps.sum(), 1e-9)),
        "max_delay_min": float(age.max() / 60.0),
        "p99_delay_min": float(np.percentile(age, 99) / 60.0),
        "steps": len(rows),
    }
    times = (trace_origin + (t - wall_origin) * plan.speedup).round(1).tolist()
    series = {
        "time": times,
        "workers": workers.astype(int).tolist(),
        "delay_min": (age / 60.0).round(3).tolist(),
    }
    return metrics, series


def simulate_segment(
    plan: DemoPlan,
    values: np.ndarray,
    steps: int,
    *,
    sizing: Any,
    job: Any,
    start: pd.Timestamp,
    policies: Sequence[str] = SIM_POLICIES,
    placement: str | None = DEMO_PLACEMENT,
) -> dict[str, Any]:
    """``kale simulate`` on the first ``steps`` live intervals, after the history warm-up;
    with ``placement``, also where each policy's workers land (``kale simulate --placement``)."""
    from autoscaler.sim.forecasting import source_factory
    from autoscaler.sim.placement_replay import PlacementSettings, replay_workers
    from autoscaler.sim.runner import compare

    warm = plan.warmup_steps
    steps = max(1, min(steps, len(values) - warm))
    arrivals = values[: warm + steps]
    factory = source_factory(
        plan.forecaster,
        start=start,
        interval_s=plan.interval_s,
        horizon_steps=plan.horizon_steps,
        refit_s=DAY_S,
        predict_every=1,
        cache_dir=None,
    )
    comp = compare(
        sizing,
        arrivals,
        list(policies),
        warmup_steps=warm,
        job=job,
        forecaster_factory=factory,
        trace_start=start,
    )
    times = [
        (start + pd.Timedelta(seconds=(warm + i + 1) * plan.interval_s)).timestamp()
        for i in range(steps)
    ]
    where: dict[str, Any] = {}
    if placement is not None:
        settings = PlacementSettings(policy=placement)
        where = {
            name: replay_workers(r.workers, sizing.gpus_per_worker, settings)
            for name, r in comp.results.items()
        }
    return {
        "policies": comp.metrics,
        "placement": where,
        "lower_bound_gpu_hours": comp.lower_bound_gpu_hours,
        "steps": steps,
        "series": {
            "time": times,
            "arrivals": [float(v) for v in arrivals[warm:]],
            "policies": {
                name: {
                    "workers": r.workers.round(2).tolist(),
                    "delay_min": (r.delay / 60.0).round(3).tolist(),
                }
                for name, r in comp.results.items()
            },
        },
    }


def rows_for_table(result: dict[str, Any]) -> tuple[list[list[Any]], list[str]]:
    """The printed table: live Kale first, then the simulated policies."""
    lb = result.get("lower_bound_gpu_hours") or 0.0
    headers = ["policy", *(h for _, h in METRIC_COLUMNS), "x_lower_bound"]
    rows = []
    for name, m in result["policies"].items():
        if not m or "slo_violation_rate" not in m:
            continue
        ratio = m["gpu_hours"] / lb if lb > 0 else float("nan")
        rows.append([name, *(m.get(k) for k, _ in METRIC_COLUMNS), ratio])
    return rows, headers


def format_table(result: dict[str, Any]) -> str:
    """The comparison as an aligned table (violations in %, numbers formatted one way)."""
    rows, headers = rows_for_table(result)
    return table(rows, headers, percent=("violations",))


def format_where(result: dict[str, Any]) -> str | None:
    """Where each simulated policy's workers landed, as a table (None: not computed)."""
    where = result.get("placement") or {}
    if not where:
        return None
    rows = [[name, *(p.get(k) for k, _ in WHERE_COLUMNS)] for name, p in where.items()]
    return table(rows, ["policy", *(h for _, h in WHERE_COLUMNS)])


def closing_lines(
    result: dict[str, Any],
    plan: DemoPlan,
    *,
    wall_s: float,
    interrupted: bool,
    state_dir: Path | None,
) -> list[str]:
    """What ``kale demo`` prints at the end: what ran, the table, and how to look again."""
    lines = [
        "",
        f"kale demo: {result.get('replayed_days', 0):.2f} days of traffic replayed in "
        f"{wall_s:.0f}s wall{' (interrupted)' if interrupted else ''}; "
        f"{result.get('live_steps', 0)} controller ticks; SLO {plan.slo_s / 60:g} min, "
        f"rescale {plan.rescale_s / 60:g} min, {plan.interval_s / 60:g}-min steps",
        format_table(result),
        "lower bound (per-step minimum, free resizes): "
        f"{format_number(result.get('lower_bound_gpu_hours', 0))} GPU-hours",
        "kale-live: measured from the running controller; the others: `kale simulate` "
        "on the same trace segment.",
    ]
    where = format_where(result)
    if where is not None:
        policy = next(iter(result["placement"].values()))
        lines += [
            f"where their workers land ({policy['policy']} on a shared "
            f"{policy['nodes']}-node cluster, {policy['background_gpu_share']:.0%} held by "
            "other work; as `kale simulate --placement`):",
            where,
        ]
    if state_dir is not None:
        lines.append(
            f"state kept: kale dashboard --state {state_dir} "
            f"--simulation {state_dir / 'simulation.json'}"
        )
    else:
        lines.append("(--state DIR keeps the run for `kale dashboard --state DIR`)")
    return lines


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (the dashboard may be reading the file)."""
    atomic_write_text(path, json.dumps(data, default=_json_default), fsync=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")
