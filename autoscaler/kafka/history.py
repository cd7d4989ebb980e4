"""The meter's memory: Kafka snapshots in a SQLite file that survives restarts.

Why this module exists: rates are differences of counters, so the meter needs the previous
snapshot, and the forecaster needs days of arrival history. Both must survive a restart of
the controller. SQLite (stdlib) in WAL mode gives atomic appends (one transaction per write,
so a crash never leaves half a snapshot) and lets a CLI read while a controller writes.

What is stored, per (topic, group): the wall time, the sum of high watermarks (a topic-wide
cumulative counter of records ever written), the sum of committed offsets, and the derived
rates, lag and oldest age. Backfilled history (``source='backfill'``) is topic-wide and
stored with an empty group. :meth:`HistoryStore.arrival_series` turns the cumulative counter
of *any* rows of a topic into samples/s on a regular grid, so meter samples taken at
irregular times and backfilled points combine into one series.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeAlias

import numpy as np
import pandas as pd

from common.errors import KaleError

#: Bump when the table layout changes; older files are migrated, newer ones refused.
#: 2: the ``breaks`` table (moments the counters stopped being comparable), ``topic_ids``.
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    topic            TEXT    NOT NULL,
    grp              TEXT    NOT NULL,
    t                REAL    NOT NULL,   -- wall time, seconds since the epoch (UTC)
    end_total        INTEGER NOT NULL,   -- sum of high watermarks over partitions
    committed_total  INTEGER,            -- sum of committed offsets (NULL for backfill)
    arrival_rate     REAL,               -- records/s over the window ending at t
    consumption_rate REAL,
    lag              INTEGER,
    oldest_age_s     REAL,
    partitions       INTEGER,
    source           TEXT    NOT NULL,   -- 'meter' or 'backfill'
    PRIMARY KEY (topic, grp, source, t)
);
CREATE INDEX IF NOT EXISTS snapshots_topic_t ON snapshots (topic, t);
CREATE TABLE IF NOT EXISTS breaks (
    topic TEXT NOT NULL,
    grp   TEXT NOT NULL,
    t     REAL NOT NULL,   -- snapshots before this time are no baseline for later ones
    why   TEXT NOT NULL,   -- 'backwards', 'recreated' (new topic id) or 'unavailable'
    PRIMARY KEY (topic, grp, t)
);
CREATE TABLE IF NOT EXISTS topic_ids (
    topic    TEXT NOT NULL,
    grp      TEXT NOT NULL,   -- per group: each group's meter notices the change itself
    topic_id TEXT NOT NULL,   -- the broker's id of the topic (KIP-516) when last seen
    t        REAL NOT NULL,
    PRIMARY KEY (topic, grp)
);
"""

Since: TypeAlias = float | dt.datetime | pd.Timestamp


class HistoryError(KaleError):
    """The history file cannot be used (written by a newer Kale, or not a Kale history)."""


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """One row of the history."""

    topic: str
    group: str
    time: float
    end_total: int
    committed_total: int | None = None
    arrival_rate: float | None = None
    consumption_rate: float | None = None
    lag: int | None = None
    oldest_age_s: float | None = None
    partitions: int | None = None
    source: str = "meter"


_COLUMNS = (
    "topic, grp, t, end_total, committed_total, arrival_rate, consumption_rate, "
    "lag, oldest_age_s, partitions, source"
)


def _row(values: tuple[object, ...]) -> StoredSnapshot:
    return StoredSnapshot(*values)  # type: ignore[arg-type]


def _epoch(value: Since) -> float:
    if isinstance(value, int | float):
        return float(value)
    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.timestamp()


class HistoryStore:
    """SQLite store of meter snapshots; safe to share between threads of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise HistoryError(f"{self.path}: not a usable Kale history file: {exc}") from exc

    def _migrate(self) -> None:
        (version,) = self._conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"{self.path}: history schema version {version} is newer than this Kale "
                f"understands ({SCHEMA_VERSION})"
            )
        if version < SCHEMA_VERSION:
            # One transaction: the tables and the version number appear together or not at all.
            try:
                self._conn.executescript(
                    "BEGIN;" + _SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                )
            except sqlite3.Error:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    # -- writing -------------------------------------------------------------------------

    def append(self, *rows: StoredSnapshot) -> None:
        """Store rows atomically (all or none); a row with the same key is replaced."""
        if not rows:
            return
        values = [
            (
                r.topic,
                r.group,
                r.time,
                int(r.end_total),
                r.committed_total,
                r.arrival_rate,
                r.consumption_rate,
                r.lag,
                r.oldest_age_s,
                r.partitions,
                r.source,
            )
            for r in rows
        ]
        with self._lock, self._conn:
            self._conn.executemany(
                f"INSERT OR REPLACE INTO snapshots ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )

    # -- reading -------------------------------------------------------------------------

    def latest(
        self,
        topic: str,
        group: str,
        *,
        at_or_before: float | None = None,
        source: str = "meter",
        since: float | None = None,
    ) -> StoredSnapshot | None:
        """The newest row of (topic, group, source) taken at or before ``at_or_before``
        (and at or after ``since``)."""
        limit = math.inf if at_or_before is None else at_or_before
        first = -math.inf if since is None else since
        with self._lock:
            cur = self._conn.execute(
                f"SELECT {_COLUMNS} FROM snapshots WHERE topic = ? AND grp = ? AND source = ? "
                "AND t <= ? AND t >= ? ORDER BY t DESC LIMIT 1",
                (topic, group, source, limit, first),
            )
            found = cur.fetchone()
        return _row(found) if found else None

    def mark_break(self, topic: str, group: str, t: float, why: str) -> None:
        """From ``t`` on, no snapshot before ``t`` is a baseline for (topic, group): the
        counters went backwards (an in-memory broker restarted, the topic was re-created) or
        the broker could not be reached (it may have restarted unseen)."""
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO breaks (topic, grp, t, why) VALUES (?, ?, ?, ?)",
                (topic, group, t, why),
            )

    def topic_id(self, topic: str, group: str) -> str | None:
        """The id the topic had when (topic, group) was last measured (None: unknown)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT topic_id FROM topic_ids WHERE topic = ? AND grp = ?", (topic, group)
            ).fetchone()
        return str(row[0]) if row else None

    def set_topic_id(self, topic: str, group: str, topic_id: str, t: float) -> None:
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO topic_ids (topic, grp, topic_id, t) VALUES (?, ?, ?, ?)",
                (topic, group, topic_id, t),
            )

    def last_break(self, topic: str, group: str) -> float | None:
        """Time of the newest break of (topic, group), None when there was none."""
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(t) FROM breaks WHERE topic = ? AND grp = ?", (topic, group)
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else None

    def rows(
        self, topic: str, group: str | None = None, *, since: Since | None = None
    ) -> list[StoredSnapshot]:
        """Rows of ``topic`` (of one group, or all), oldest first."""
        query = f"SELECT {_COLUMNS} FROM snapshots WHERE topic = ? AND t >= ?"
        args: list[object] = [topic, -math.inf if since is None else _epoch(since)]
        if group is not None:
            query += " AND grp = ?"
            args.append(group)
        with self._lock:
            found = self._conn.execute(query + " ORDER BY t, source, grp", args).fetchall()
        return [_row(r) for r in found]

    def has_topic(self, topic: str) -> bool:
        """Whether any row (meter or backfill) exists for ``topic``."""
        with self._lock:
            cur = self._conn.execute("SELECT 1 FROM snapshots WHERE topic = ? LIMIT 1", (topic,))
            return cur.fetchone() is not None

    def arrival_series(
        self,
        topic: str,
        since: Since,
        interval_s: float = 60.0,
        *,
        until: Since | None = None,
        max_gap_s: float | None = None,
    ) -> pd.Series:
        """Arrival rate (records/s) of ``topic`` per interval, on an epoch-aligned grid.

        Built from the cumulative record counter (``end_total``) of every stored row of the
        topic: the counter is interpolated linearly at the grid edges and differenced, so
        irregular meter samples and backfilled points combine. Only intervals covered by data
        on both sides are returned (index: interval start, tz-aware UTC, regular ``freq``).
        A counter that goes down (the topic was re-created) contributes no arrivals for that
        step. With ``max_gap_s``, an interval that falls inside a gap between stored rows
        longer than that is NaN instead of the gap's average rate.
        """
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        start = _epoch(since)
        stop = math.inf if until is None else _epoch(until)
        with self._lock:
            # One row before `since` lets the first interval be interpolated.
            before = self._conn.execute(
                "SELECT t, MAX(end_total) FROM snapshots WHERE topic = ? AND t < ? "
                "GROUP BY t ORDER BY t DESC LIMIT 1",
                (topic, start),
            ).fetchall()
            after = self._conn.execute(
                "SELECT t, MAX(end_total) FROM snapshots WHERE topic = ? AND t >= ? AND t <= ? "
                "GROUP BY t ORDER BY t",
                (topic, start, stop + interval_s),
            ).fetchall()
        points = before + after
        empty = pd.Series([], dtype=float, index=pd.DatetimeIndex([], tz="UTC"))
        empty.name = "arrival_rate"
        if len(points) < 2:
            return empty
        times = np.array([p[0] for p in points], dtype=float)
        counter = np.array([p[1] for p in points], dtype=float)
        # Cumulative arrivals, robust to counter resets (negative steps count as zero).
        cumulative = np.concatenate([[0.0], np.cumsum(np.clip(np.diff(counter), 0, None))])
        first_edge = math.ceil(max(start, times[0]) / interval_s) * interval_s
        last_edge = math.floor(min(stop, times[-1]) / interval_s) * interval_s
        if last_edge - first_edge < interval_s - 1e-9:
            return empty
        edges = np.arange(first_edge, last_edge + interval_s / 2, interval_s)
        at_edges = np.interp(edges, times, cumulative)
        rates = np.diff(at_edges) / interval_s
        if max_gap_s is not None:
            # The gap around each interval: distance between the stored rows enclosing it.
            right = np.searchsorted(times, edges[1:], side="left")
            left = np.searchsorted(times, edges[:-1], side="right") - 1
            right = np.clip(right, 0, len(times) - 1)
            left = np.clip(left, 0, len(times) - 1)
            rates = np.where(times[right] - times[left] > max_gap_s, np.nan, rates)
        index = pd.date_range(
            pd.Timestamp(first_edge, unit="s", tz="UTC"),
            periods=len(rates),
            freq=pd.Timedelta(seconds=interval_s),
        )
        return pd.Series(rates, index=index, name="arrival_rate")

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
