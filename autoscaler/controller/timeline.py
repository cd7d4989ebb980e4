"""The controller's per-tick history of every job: what the dashboard draws.

Why this module exists: the state store keeps only the *latest* state of a job (enough to
resume after a restart), and Prometheus keeps series only where someone scrapes it. An
operator asking "why did the job grow at 18:40, and was the forecast right?" needs the
history itself: per tick the measured arrival rate, the forecast that the decision used (for
the step one lead time ahead, so it can be laid over the rate that then arrived), the size,
the backlog and the oldest unconsumed age, the decision and its reason. This module appends
one row per job per tick to ``<stateDir>/timeline.sqlite`` and reads it back for
:mod:`kale.dashboard`.

Append-only and small: one row per job per interval (~1,500 rows a day at 60 s), pruned past
``retention_s``. Writing never stops a tick: the loop catches and logs any failure. The
dashboard opens the file read-only (SQLite WAL: readers never block the writer).
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # the dashboard reads this module; it needs none of the loop's imports
    from autoscaler.controller.runtime import JobRuntime
    from autoscaler.controller.status import JobReport
    from autoscaler.policy.forecasts import ForecastWindow

#: Keep this much history (seconds of the controller's clock).
RETENTION_S = 28 * 86400.0
#: Prune old rows once per this many appended rows.
PRUNE_EVERY = 2000

_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job", "TEXT NOT NULL"),
    ("t", "REAL NOT NULL"),
    ("step", "INTEGER"),
    ("arrival", "REAL"),
    ("consumption", "REAL"),
    ("lag", "REAL"),
    ("oldest_age", "REAL"),
    ("workers", "INTEGER"),
    ("ps", "INTEGER"),
    ("planned", "INTEGER"),
    ("desired_workers", "INTEGER"),
    ("desired_ps", "INTEGER"),
    ("gpus", "INTEGER"),
    ("capacity", "REAL"),
    ("resizing", "INTEGER"),
    ("resized", "INTEGER"),
    ("fc_t", "REAL"),
    ("fc_mean", "REAL"),
    ("fc_p10", "REAL"),
    ("fc_p90", "REAL"),
    ("fc_peak", "REAL"),
    ("action", "TEXT"),
    ("changed", "INTEGER"),
    ("why", "TEXT"),
    ("reason", "TEXT"),
    ("error", "TEXT"),
)
COLUMNS = tuple(name for name, _ in _COLUMNS)


def _num(value: Any) -> float | None:
    """A finite float or None (NaN, inf and missing values are stored as NULL)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class JobInfo(TypedDict):
    """A job's description in the timeline (``jobs.info``, JSON): what the dashboard needs
    besides its rows. Rates are samples/s, durations seconds."""

    key: str
    namespace: str
    name: str
    interval_s: float
    slo_s: float
    rescale_s: float
    min_workers: int
    max_workers: int
    ratio: int
    gpus_per_worker: int
    peak_workers: int
    peak_throughput: float
    capacity: list[float]
    """Throughput of w workers, w = 0 … max_workers."""
    forecast_model: str
    horizon_steps: int
    lead_steps: int
    mode: str
    target: str
    topic: str
    origin: str


def job_info(rt: JobRuntime) -> JobInfo:
    """What the dashboard needs to know about a job besides its rows (sizing, SLO, model)."""
    sz = rt.sizing
    entry = rt.entry
    spec = entry.job.spec
    lead = lead_steps(sz.rescale_s, sz.interval_s, rt.forecast.horizon_steps)
    return {
        "key": entry.key,
        "namespace": entry.namespace,
        "name": entry.name,
        "interval_s": float(sz.interval_s),
        "slo_s": float(sz.slo_s),
        "rescale_s": float(sz.rescale_s),
        "min_workers": int(sz.min_workers),
        "max_workers": int(sz.max_workers),
        "ratio": int(sz.ratio),
        "gpus_per_worker": int(sz.gpus_per_worker),
        "peak_workers": int(sz.peak_workers),
        "peak_throughput": float(sz.peak_throughput),
        "capacity": [float(c) for c in sz.capacity],
        "forecast_model": str(rt.forecast.name),
        "horizon_steps": int(rt.forecast.horizon_steps),
        "lead_steps": lead,
        "mode": str(spec.training.mode),
        "target": str(spec.target.kind),
        "topic": str(spec.source.kafka.topic),
        "origin": entry.origin,
    }


def lead_steps(rescale_s: float, interval_s: float, horizon_steps: int) -> int:
    """Steps between a decision and the step its forecast is judged on: the rescale
    duration rounded up (at least one step), within the horizon."""
    lead = max(1, math.ceil(rescale_s / interval_s - 1e-9)) if interval_s > 0 else 1
    return max(0, min(lead, horizon_steps - 1))


class TimelineStore:
    """``timeline.sqlite``: rows per job per tick, job descriptions, and free-form metadata.

    The writer (the controller) and readers (the dashboard, tests) use the same class;
    ``readonly=True`` opens the file without ever writing to it.
    """

    def __init__(
        self, path: str | Path, *, readonly: bool = False, retention_s: float = RETENTION_S
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.retention_s = retention_s
        self._lock = threading.Lock()
        self._infos: dict[str, str] = {}
        self._actions: dict[str, str] = {}
        self._appended = 0
        if readonly:
            self._conn = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, timeout=10.0, check_same_thread=False
            )
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        cols = ", ".join(f"{n} {ty}" for n, ty in _COLUMNS)
        with self._conn:
            self._conn.execute(f"CREATE TABLE IF NOT EXISTS ticks ({cols})")
            self._conn.execute("CREATE INDEX IF NOT EXISTS ticks_job_t ON ticks (job, t)")
            self._conn.execute("CREATE INDEX IF NOT EXISTS ticks_t ON ticks (t)")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, "
                "updated REAL, info TEXT NOT NULL)"
            )
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )

    # -- writing (the controller) ---------------------------------------------------------
    def record(
        self, rt: JobRuntime, rep: JobReport, now: float, window: ForecastWindow | None
    ) -> None:
        """Append the tick of one job (``window``: the forecast its decision was made on)."""
        sz = rt.sizing
        s = rep.sample
        cur = rep.current
        step = int(now // sz.interval_s)
        resizing, _ = rt.resizing(now)
        held = cur.workers if cur is not None else None
        state = rt.state
        if resizing and held is not None:
            for size in (state.resize_from, state.resize_to):
                if size:
                    held = max(held, int(size[0]))
        fc_t = fc_mean = fc_p10 = fc_p90 = fc_peak = None
        w = window
        if w is not None and len(w):
            lead = lead_steps(sz.rescale_s, sz.interval_s, len(w))
            fc_t = (step + lead + 1) * sz.interval_s
            fc_mean, fc_p10, fc_p90 = (_num(w.mean[lead]), _num(w.low[lead]), _num(w.high[lead]))
            fc_peak = _num(max(w.high))
        reason = rep.reason or {}
        row = {
            "job": rt.key,
            "t": float(now),
            "step": step,
            "arrival": _num(s.arrival_rate) if s else None,
            "consumption": _num(s.consumption_rate) if s else None,
            "lag": _num(s.lag) if s else None,
            "oldest_age": _num(s.oldest_age_s) if s else None,
            "workers": cur.workers if cur else None,
            "ps": cur.ps if cur else None,
            "planned": rep.planned.workers if rep.planned else None,
            "desired_workers": rep.desired.workers if rep.desired else None,
            "desired_ps": rep.desired.ps if rep.desired else None,
            "gpus": held * sz.gpus_per_worker if held is not None else None,
            "capacity": _num(sz.rate(min(cur.workers, sz.max_workers))) if cur else None,
            "resizing": int(bool(resizing)),
            "resized": int(bool(rep.resized)),
            "fc_t": fc_t,
            "fc_mean": fc_mean,
            "fc_p10": fc_p10,
            "fc_p90": fc_p90,
            "fc_peak": fc_peak,
            "action": rep.action,
            "changed": int(self._actions.get(rt.key) != rep.action),
            "why": str(reason.get("why", ""))[:500],
            "reason": json.dumps(reason, default=str, separators=(",", ":"))[:4000],
            "error": rep.error,
        }
        info = json.dumps(job_info(rt), separators=(",", ":"))
        with self._lock, self._conn:
            self._conn.execute(
                f"INSERT INTO ticks ({', '.join(COLUMNS)}) VALUES "
                f"({', '.join('?' for _ in COLUMNS)})",
                [row[c] for c in COLUMNS],
            )
            if self._infos.get(rt.key) != info:
                self._conn.execute(
                    "INSERT OR REPLACE INTO jobs (job, updated, info) VALUES (?, ?, ?)",
                    (rt.key, now, info),
                )
                self._infos[rt.key] = info
            self._actions[rt.key] = rep.action
            self._appended += 1
            if self._appended % PRUNE_EVERY == 0:
                self._conn.execute("DELETE FROM ticks WHERE t < ?", (now - self.retention_s,))

    def set_meta(self, **values: Any) -> None:
        """Store JSON-able metadata (quota, interval, a display scale for demos)."""
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    # -- reading (the dashboard) ----------------------------------------------------------
    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return []  # a controller that has not written yet
                raise

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._query("SELECT key, value FROM meta")}

    def jobs(self) -> dict[str, dict[str, Any]]:
        """Job key → its description (see :func:`job_info`)."""
        return {k: json.loads(v) for k, v in self._query("SELECT job, info FROM jobs ORDER BY job")}

    def rows(
        self, job: str | None = None, *, since: float | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows in time order (the newest ``limit`` when given)."""
        where: list[str] = []
        args: list[str | float] = []
        if job is not None:
            where.append("job = ?")
            args.append(job)
        if since is not None:
            where.append("t >= ?")
            args.append(since)
        sql = f"SELECT {', '.join(COLUMNS)} FROM ticks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY t DESC, job"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = [dict(zip(COLUMNS, r, strict=True)) for r in self._query(sql, tuple(args))]
        rows.reverse()
        return rows

    def latest(self) -> dict[str, dict[str, Any]]:
        """The newest row of every job."""
        sql = (
            f"SELECT {', '.join(COLUMNS)} FROM ticks WHERE rowid IN "
            "(SELECT MAX(rowid) FROM ticks GROUP BY job)"
        )
        return {r[0]: dict(zip(COLUMNS, r, strict=True)) for r in self._query(sql)}

    def decisions(
        self, *, limit: int = 50, job: str | None = None, resizes_only: bool = False
    ) -> list[dict[str, Any]]:
        """The newest decisions first: resizes and failed ticks, and (unless
        ``resizes_only``) every decision whose action differs from the job's previous one."""
        where = "resized = 1 OR error IS NOT NULL"
        if not resizes_only:
            where += " OR changed = 1"
        sql = f"SELECT {', '.join(COLUMNS)} FROM ticks WHERE ({where})"
        args: tuple[Any, ...] = ()
        if job is not None:
            sql += " AND job = ?"
            args = (job,)
        sql += f" ORDER BY t DESC, job LIMIT {int(limit)}"
        return [dict(zip(COLUMNS, r, strict=True)) for r in self._query(sql, args)]

    def gpus_by_tick(self, *, since: float | None = None) -> list[tuple[float, int, int]]:
        """(tick time, GPUs held by all jobs, jobs) per tick."""
        sql = "SELECT t, SUM(COALESCE(gpus, 0)), COUNT(*) FROM ticks"
        args: tuple[Any, ...] = ()
        if since is not None:
            sql += " WHERE t >= ?"
            args = (since,)
        sql += " GROUP BY t ORDER BY t"
        return [(float(t), int(g), int(n)) for t, g, n in self._query(sql, args)]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
