"""The demo's segment of traffic: the trace, the job in both time bases, the simulator runs.

Why this module exists: the demo compares its live run with the simulator on exactly the
trace segment it replayed; this holds what both need (the generated trace, the job sized
from the scaled throughput model, the warm-up) and computes the closing comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.errors import UserError
from kale.demo import plan as plans
from kale.demo.plan import DemoPlan
from kale.demo.summary import live_metrics, simulate_segment


class DemoSetup:
    """The trace, the job in both time bases, the scaled model, and the simulator runs."""

    def __init__(self, plan: DemoPlan, state: Path) -> None:
        from autoscaler.job.loading import parse_job
        from autoscaler.policy.sizing import sizing_for
        from autoscaler.sim.traces import save_trace

        self.plan, self.state = plan, state
        self.model = plans.load_model(plan)
        job, problems = parse_job(plans.job_doc(plan, wall=False))
        if job is None or problems:
            raise UserError(f"demo job: {problems}")
        self.job = job
        self.sizing = sizing_for(job, self.model, interval_s=plan.interval_s)
        self.trace = plans.trace(plan, self.sizing.peak_throughput)
        self.trace_origin = plans.trace_origin(plan, self.trace)
        self.records_scale = plans.records_scale(plan, self.trace)
        self.values = plans.on_interval(plan, self.trace)
        self.sim_path = state / "simulation.json"
        save_trace(self.trace, state / "trace.csv")
        warm = plan.warmup_steps
        self.w0 = self.sizing.workers_for(float(self.values[warm - 1]))[0]
        self.planned_steps = int(plan.live_trace_s // plan.interval_s)

    def simulate(self, steps: int, *, title: str) -> dict[str, Any]:
        plan = self.plan
        out = simulate_segment(
            plan, self.values, steps, sizing=self.sizing, job=self.job, start=self.trace.index[0]
        )
        out.update(
            title=title,
            job="demo/ctr-model",
            interval_s=plan.interval_s,
            slo_s=plan.slo_s,
            rescale_s=plan.rescale_s,
            warmup_steps=plan.warmup_steps,
            forecaster=plan.forecaster,
            peak_workers=self.sizing.peak_workers,
            trace=str(self.state / "trace.csv"),
        )
        return out

    def summary(self, *, wall0: float, wall_end: float | None, records_sent: int) -> dict[str, Any]:
        """The comparison at the end: the live run from the timeline (wall ``wall0`` to
        ``wall_end``), the simulator on the same segment of the trace."""
        from autoscaler.controller.timeline import TimelineStore

        plan = self.plan
        rows: list[dict[str, Any]] = []
        path = self.state / "timeline.sqlite"
        if path.exists():
            store = TimelineStore(path, readonly=True)
            try:
                rows = store.rows()
            finally:
                store.close()
        end = wall_end if wall_end is not None else wall0
        steps = max(1, round((end - wall0) / plan.tick_s))
        metrics, series = live_metrics(
            rows,
            plan,
            wall_origin=wall0,
            wall_end=end,
            trace_origin=self.trace_origin.timestamp(),
        )
        sim = self.simulate(steps, title="kale demo: live Kale vs the simulator on the same replay")
        lb = sim["lower_bound_gpu_hours"]
        if metrics.get("steps") and lb > 0:
            metrics["lower_bound_ratio"] = metrics["gpu_hours"] / lb
        policies = {"kale-live": metrics} if metrics.get("steps") else {}
        policies.update(sim["policies"])
        sim["policies"] = policies
        if metrics.get("steps"):
            sim["series"]["policies"] = {"kale-live": {**series}, **sim["series"]["policies"]}
        sim.update(
            live_steps=metrics.get("steps", 0),
            replayed_days=steps * plan.interval_s / plans.DAY_S,
            records_sent=records_sent,
            speedup=plan.speedup,
            records_scale=self.records_scale,
            note=f"kale-live measured on {metrics.get('steps', 0)} controller ticks; "
            "the others simulated on the same trace segment",
        )
        return sim
