"""Per-job controller state that must survive a restart, so a new process converges.

What is kept (all JSON): the planner's own state dict (hold windows, the last forecast band),
when the last resize started and between which sizes (a restarted controller must not start
another resize while one is still settling), the last decision and the conditions (so
``lastTransitionTime`` stays put across restarts).

Two homes, one interface: a SQLite file in the state directory (local mode and a single
replica), and the job's own custom resource status (``status.plannerState``, written every
tick), which a standby replica reads when it takes over the lease. The loop loads from the
store first and falls back to the status.
"""

from __future__ import annotations

import json
import math
import operator
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, TypedDict


class Condition(TypedDict, total=False):
    """A Kubernetes-style condition, as kept in the state and written to the status.

    Every key is written by :class:`~autoscaler.controller.status.Conditions`; the reader
    still checks them (``total=False``), since a status a replica resumes from may have been
    patched by anyone."""

    type: str
    status: str
    """``"True"``, ``"False"`` or ``"Unknown"``."""
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int
    """Only on the status's copy: the job's generation the condition was computed for."""


PendingResize = TypedDict(
    "PendingResize",
    {"from": list[int], "to": list[int], "since": float, "attempts": int, "why": str},
    total=False,
)
"""The resize-in-progress marker (``from``/``to`` as [workers, ps]); see ``JobState.pending``.
(Functional form: ``from`` is a keyword.)"""


class LastDecision(TypedDict, total=False):
    """The last decision as the status shows it (``status.lastDecision`` without details)."""

    time: str
    action: str
    reason: str
    workers: int | None
    ps: int | None


class SavedState(TypedDict):
    """:class:`JobState` as stored (JSON): what :meth:`JobState.to_dict` gives."""

    policy: dict[str, Any]
    resize_started: float | None
    resize_from: list[int] | None
    resize_to: list[int] | None
    last_decision: LastDecision | None
    conditions: list[Condition]
    last_current: list[int] | None
    pending: PendingResize | None
    saved_at: float | None


@dataclass
class JobState:
    """Everything the controller remembers about one job between ticks."""

    policy: dict[str, Any] = field(default_factory=dict)
    """The planner's JSON-able state (``KalePolicy.decide`` reads and updates it)."""
    resize_started: float | None = None
    """Epoch seconds when the last resize was applied."""
    resize_from: list[int] | None = None
    """[workers, ps] before that resize."""
    resize_to: list[int] | None = None
    """[workers, ps] it resized to."""
    last_decision: LastDecision | None = None
    conditions: list[Condition] = field(default_factory=list)
    last_current: list[int] | None = None
    """[workers, ps] last read from the target (used when it cannot be read)."""
    pending: PendingResize | None = None
    """The resize under way and not yet finished (``from``, ``to`` as [workers, ps],
    ``since``, ``attempts``, ``why``): set and saved *before* the first write, cleared when
    every write is done, so a partial failure or a crash between the PS and the worker write
    is finished (rolled forward) by the next tick instead of being planned afresh."""
    saved_at: float | None = None
    """The tick that wrote this state: of two copies (SQLite, the job's status) the newer
    one wins, so a replica that leads again does not act on what it remembered from before."""

    def to_dict(self) -> SavedState:
        """A shallow copy as a dict (``dataclasses.asdict`` deep-copies: too slow per tick)."""
        return {
            "policy": dict(self.policy),
            "resize_started": self.resize_started,
            "resize_from": self.resize_from,
            "resize_to": self.resize_to,
            "last_decision": self.last_decision,
            "conditions": list(self.conditions),
            "last_current": self.last_current,
            "pending": self.pending.copy() if self.pending else None,
            "saved_at": self.saved_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> JobState:
        """The state from its JSON form; fields of the wrong shape are dropped, not trusted
        (the status a replica resumes from is writable by whoever may patch the status)."""
        if not isinstance(data, dict):
            return cls()
        known = {
            f.name: data[f.name]
            for f in fields(cls)
            if f.name in data and _CHECKS[f.name](data[f.name])
        }
        return cls(**known)


def _size(v: Any) -> bool:
    return (
        isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1_000_000 for x in v)
    )


def _time(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _pending(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and _size(v.get("from"))
        and _size(v.get("to"))
        and _time(v.get("since"))
        and isinstance(v.get("attempts", 0), int)
    )


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "policy": lambda v: isinstance(v, dict),
    "resize_started": lambda v: v is None or _time(v),
    "resize_from": lambda v: v is None or _size(v),
    "resize_to": lambda v: v is None or _size(v),
    "last_decision": lambda v: v is None or isinstance(v, dict),
    "conditions": lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v),
    "last_current": lambda v: v is None or _size(v),
    "pending": lambda v: v is None or _pending(v),
    "saved_at": lambda v: v is None or _time(v),
}


VOLATILE_POLICY = frozenset({"last_prediction", "band_seen"})
"""Keys of the planner's state that change every tick and that a restart can do without:
the forecast band predicted for the next steps (without it, or with an older one, the first
tick after a restart plans afresh instead of following its plan) and the bands kept for the
steps of the SLO's window (with an older book the reactive check judges the window's means
over the steps it still has, for at most one window)."""


def restart_view(state: SavedState) -> tuple[Any, ...]:
    """What of a saved state a restarted controller needs exactly as it was left.

    Left out: when the state was saved, the last decision (what the status shows; the next
    tick makes a new one), the conditions' messages (rewritten every tick; their status,
    reason and transition time stay) and the planner's :data:`VOLATILE_POLICY`. A state
    whose view is unchanged since it was last written need not be written again at once
    (:meth:`autoscaler.controller.loop.Controller.tick` writes it every few ticks).
    """
    return (
        {k: v for k, v in state["policy"].items() if k not in VOLATILE_POLICY},
        state["resize_started"],
        state["resize_from"],
        state["resize_to"],
        _condition_keys(state["conditions"]),
        state["last_current"],
        state["pending"],
    )


def live_restart_view(state: JobState) -> tuple[Any, ...]:
    """:func:`restart_view` of ``state.to_dict()``, without copying the state first (a
    tick compares every job's view and writes few of them)."""
    return (
        {k: v for k, v in state.policy.items() if k not in VOLATILE_POLICY},
        state.resize_started,
        state.resize_from,
        state.resize_to,
        _condition_keys(state.conditions),
        state.last_current,
        state.pending.copy() if state.pending else None,
    )


_KEYS = operator.itemgetter("type", "status", "reason", "lastTransitionTime")


def _condition_keys(conditions: list[Condition]) -> list[tuple[Any, ...]]:
    """Each condition without its message (at C speed; a partial one from a status that
    someone patched, key by key)."""
    try:
        return list(map(_KEYS, conditions))
    except (KeyError, TypeError):
        keys = ("type", "status", "reason", "lastTransitionTime")
        return [tuple(c.get(k) if isinstance(c, dict) else c for k in keys) for c in conditions]


_ENCODER = json.JSONEncoder(default=float, check_circular=False, separators=(",", ":"))
"""States are trees of dicts and lists (no cycles): skip the cycle check, every tick, for
every job."""


class StateStore(Protocol):
    def load(self, key: str) -> dict[str, Any] | None: ...

    def save_many(self, states: dict[str, SavedState]) -> None: ...

    def delete(self, key: str) -> None: ...

    def close(self) -> None: ...


class MemoryStateStore:
    """A dict; for tests and ``kale plan``."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def load(self, key: str) -> dict[str, Any] | None:
        raw = self.data.get(key)
        return json.loads(raw) if raw is not None else None

    def save_many(self, states: dict[str, SavedState]) -> None:
        for k, v in states.items():
            self.data[k] = json.dumps(v)

    def delete(self, key: str) -> None:
        self.data.pop(key, None)

    def close(self) -> None:
        pass


class SqliteStateStore:
    """``<state dir>/controller.sqlite``: one row per job, all rows written in one transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS job_state (key TEXT PRIMARY KEY, state TEXT NOT NULL)"
        )
        self._conn.commit()

    def load(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT state FROM job_state WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def save_many(self, states: dict[str, SavedState]) -> None:
        if not states:
            return
        rows = [(k, _ENCODER.encode(v)) for k, v in states.items()]
        with self._lock, self._conn:
            # An upsert rewrites the row in place (REPLACE deletes it and inserts it anew).
            self._conn.executemany(
                "INSERT INTO job_state (key, state) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET state = excluded.state",
                rows,
            )

    def delete(self, key: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM job_state WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
