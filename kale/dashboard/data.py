"""What the dashboard shows, as JSON-able dicts: read from a state directory, never written.

Why this module exists: the page and API users want one shape per view (jobs, one job's
series, decisions, cluster, simulations), built from the controller's timeline
(:mod:`autoscaler.controller.timeline`), its status files and saved ``kale simulate --json``
results (:mod:`kale.dashboard.simulations`). Keeping it free of HTTP makes every shape
testable on a state directory alone.

Units: times are epoch seconds, rates samples/s, durations seconds. A time-compressed run (the
demo) stores a :class:`Display` in the timeline's metadata; every value is then shown in the
units of the traffic it replays (trace time, samples rather than records), so the numbers on
the page are the job's real ones and not those of the compressed replay.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autoscaler.controller.timeline import TimelineStore

#: Rows per job a series returns by default (a day of 1-minute ticks and some).
DEFAULT_POINTS = 2000
MAX_POINTS = 50_000


@dataclass(frozen=True)
class Display:
    """How to show a time-compressed run: wall time → trace time, records → samples.

    ``speedup`` trace seconds pass per wall second; ``rate_scale`` samples per record-rate
    unit (a measured rate of r records/s is r × rate_scale samples/s of the trace).
    """

    speedup: float = 1.0
    wall_origin: float = 0.0
    trace_origin: float = 0.0
    rate_scale: float = 1.0
    note: str = ""

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Display:
        raw = meta.get("display")
        if not isinstance(raw, dict):
            return cls()
        known = {
            k: raw[k]
            for k in ("speedup", "wall_origin", "trace_origin", "rate_scale", "note")
            if k in raw
        }
        return cls(**known)

    @property
    def identity(self) -> bool:
        return (
            self.speedup == 1.0 and self.rate_scale == 1.0 and self.wall_origin == self.trace_origin
        )

    def time(self, t: float | None) -> float | None:
        if t is None:
            return None
        return self.trace_origin + (t - self.wall_origin) * self.speedup

    def duration(self, s: float | None) -> float | None:
        return None if s is None else s * self.speedup

    def rate(self, r: float | None) -> float | None:
        return None if r is None else r * self.rate_scale

    def count(self, n: float | None) -> float | None:
        return None if n is None else n * self.rate_scale * self.speedup

    def wall(self, t: float) -> float:
        """The inverse of :meth:`time` (a ``since`` given in display time)."""
        return self.wall_origin + (t - self.trace_origin) / self.speedup

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StateView:
    """Read-only access to one controller state directory (it may not exist yet)."""

    def __init__(self, state_dir: str | Path | None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._store: TimelineStore | None = None

    @property
    def timeline_path(self) -> Path | None:
        return self.state_dir / "timeline.sqlite" if self.state_dir is not None else None

    def store(self) -> TimelineStore | None:
        """The timeline, opened read-only on first use (None until the controller made it)."""
        if self._store is None:
            path = self.timeline_path
            if path is None or not path.exists():
                return None
            self._store = TimelineStore(path, readonly=True)
        return self._store

    def meta(self) -> dict[str, Any]:
        store = self.store()
        return store.meta() if store is not None else {}

    def display(self) -> Display:
        return Display.from_meta(self.meta())

    def status(self, key: str) -> dict[str, Any] | None:
        """The job's status file (local mode), if any."""
        if self.state_dir is None or "/" not in key:
            return None
        ns, name = key.split("/", 1)
        path = self.state_dir / "status" / f"{ns}_{name}.status.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


# -- shapes ---------------------------------------------------------------------------------


def _ready(status: dict[str, Any] | None) -> dict[str, Any] | None:
    if not status:
        return None
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            return {
                "status": c.get("status"),
                "reason": c.get("reason"),
                "message": c.get("message"),
            }
    return None


def _info(info: dict[str, Any], d: Display) -> dict[str, Any]:
    out = dict(info)
    for k in ("interval_s", "slo_s", "rescale_s"):
        if k in out:
            out[k] = d.duration(out[k])
    if "peak_throughput" in out:
        out["peak_throughput"] = d.rate(out["peak_throughput"])
    out.pop("capacity", None)
    return out


def jobs(view: StateView) -> dict[str, Any]:
    """``/api/jobs``: every job's latest tick and description."""
    store = view.store()
    d = view.display()
    if store is None:
        return {"jobs": [], "display": d.to_dict()}
    infos = store.jobs()
    latest = store.latest()
    out = []
    for key in sorted(set(infos) | set(latest)):
        info = infos.get(key, {})
        row = latest.get(key, {})
        out.append(
            {
                "key": key,
                "namespace": info.get("namespace", key.split("/")[0]),
                "name": info.get("name", key.split("/")[-1]),
                "time": d.time(row.get("t")),
                "workers": row.get("workers"),
                "ps": row.get("ps"),
                "planned_workers": row.get("planned"),
                "desired_workers": row.get("desired_workers"),
                "gpus": row.get("gpus"),
                "action": row.get("action"),
                "why": row.get("why"),
                "error": row.get("error"),
                "arrival_rate": d.rate(row.get("arrival")),
                "capacity": d.rate(row.get("capacity")),
                "forecast_peak": d.rate(row.get("fc_peak")),
                "backlog": d.count(row.get("lag")),
                "oldest_age_s": d.duration(row.get("oldest_age")),
                "slo_s": d.duration(info.get("slo_s")),
                "resizing": bool(row.get("resizing")),
                "ready": _ready(view.status(key)),
                "info": _info(info, d),
            }
        )
    return {"jobs": out, "display": d.to_dict()}


def series(
    view: StateView, job: str, *, limit: int = DEFAULT_POINTS, since: float | None = None
) -> dict[str, Any] | None:
    """``/api/jobs/{job}/series``: one job's time series; None for an unknown job."""
    store = view.store()
    if store is None:
        return None
    infos = store.jobs()
    if job not in infos:
        matches = [k for k in infos if k.split("/")[-1] == job]
        if len(matches) != 1:
            return None
        job = matches[0]
    d = view.display()
    limit = max(1, min(int(limit), MAX_POINTS))
    rows = store.rows(job, since=d.wall(since) if since is not None else None, limit=limit)
    info = infos[job]

    def col(name: str, conv: Any = None) -> list[Any]:
        vals = [r[name] for r in rows]
        return [conv(v) for v in vals] if conv is not None else vals

    fc = [r for r in rows if r["fc_t"] is not None]
    resizes = [
        {
            "time": d.time(r["t"]),
            "from_workers": r["workers"],
            "to_workers": r["desired_workers"],
            "from_ps": r["ps"],
            "to_ps": r["desired_ps"],
            "action": r["action"],
            "why": r["why"],
        }
        for r in rows
        if r["resized"]
    ]
    cap = [d.rate(c) for c in info.get("capacity", [])]
    last = rows[-1] if rows else {}
    cur_w = last.get("workers")
    return {
        "job": job,
        "info": _info(info, d),
        "display": d.to_dict(),
        "time": col("t", d.time),
        "arrival_rate": col("arrival", d.rate),
        "consumption_rate": col("consumption", d.rate),
        "capacity": col("capacity", d.rate),
        "workers": col("workers"),
        "ps": col("ps"),
        "planned_workers": col("planned"),
        "desired_workers": col("desired_workers"),
        "gpus": col("gpus"),
        "resizing": [bool(v) for v in col("resizing")],
        "backlog": col("lag", d.count),
        "oldest_age_s": col("oldest_age", d.duration),
        "action": col("action"),
        "why": col("why"),
        "slo_s": d.duration(info.get("slo_s")),
        "forecast": {
            "lead_s": d.duration(info.get("lead_steps", 0) * info.get("interval_s", 0.0)),
            "model": info.get("forecast_model"),
            "time": [d.time(r["fc_t"]) for r in fc],
            "mean": [d.rate(r["fc_mean"]) for r in fc],
            "p10": [d.rate(r["fc_p10"]) for r in fc],
            "p90": [d.rate(r["fc_p90"]) for r in fc],
        },
        "resizes": resizes,
        "throughput": {
            "workers": list(range(1, len(cap))),
            "capacity": cap[1:],
            "peak_workers": info.get("peak_workers"),
            "peak_throughput": d.rate(info.get("peak_throughput")),
            "current_workers": cur_w,
            "current_throughput": cap[cur_w]
            if cur_w is not None and 0 <= cur_w < len(cap)
            else None,
            "arrival_rate": d.rate(last.get("arrival")),
        },
    }


def decisions(view: StateView, *, limit: int = 50, job: str | None = None) -> dict[str, Any]:
    """``/api/decisions``: the newest decisions (resizes, failures, changes of action)."""
    store = view.store()
    d = view.display()
    if store is None:
        return {"decisions": []}
    rows = store.decisions(limit=max(1, min(int(limit), 1000)), job=job)
    return {
        "decisions": [
            {
                "time": d.time(r["t"]),
                "job": r["job"],
                "action": r["action"],
                "resized": bool(r["resized"]),
                "from_workers": r["workers"],
                "to_workers": r["desired_workers"],
                "planned_workers": r["planned"],
                "why": r["why"],
                "error": r["error"],
                "arrival_rate": d.rate(r["arrival"]),
                "forecast_peak": d.rate(r["fc_peak"]),
                "backlog": d.count(r["lag"]),
                "oldest_age_s": d.duration(r["oldest_age"]),
                "reason": _loads(r["reason"]),
            }
            for r in rows
        ]
    }


def cluster(view: StateView, *, limit: int = DEFAULT_POINTS) -> dict[str, Any]:
    """``/api/cluster``: GPUs held by all jobs per tick against the quota."""
    store = view.store()
    d = view.display()
    meta = view.meta()
    if store is None:
        return {"quota_gpus": None, "time": [], "gpus": [], "jobs": [], "gpu_hours": 0.0}
    ticks = store.gpus_by_tick()[-max(1, min(int(limit), MAX_POINTS)) :]
    interval = float(meta.get("interval_s") or 0.0)
    gpu_hours = sum(g for _, g, _ in ticks) * (d.duration(interval) or 0.0) / 3600.0
    latest = store.latest()
    return {
        "quota_gpus": meta.get("quota_gpus"),
        "time": [d.time(t) for t, _, _ in ticks],
        "gpus": [g for _, g, _ in ticks],
        "jobs": [n for _, _, n in ticks],
        "gpus_now": sum((r.get("gpus") or 0) for r in latest.values()),
        "gpu_hours": gpu_hours,
        "interval_s": d.duration(interval),
        "display": d.to_dict(),
    }


def _loads(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
