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
import sqlite3
import threading
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol


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
    last_decision: dict[str, Any] | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    last_current: list[int] | None = None
    """[workers, ps] last read from the target (used when it cannot be read)."""

    def to_dict(self) -> dict[str, Any]:
        """A shallow copy as a dict (``dataclasses.asdict`` deep-copies: too slow per tick)."""
        return {
            "policy": dict(self.policy),
            "resize_started": self.resize_started,
            "resize_from": self.resize_from,
            "resize_to": self.resize_to,
            "last_decision": self.last_decision,
            "conditions": list(self.conditions),
            "last_current": self.last_current,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JobState:
        if not isinstance(data, dict):
            return cls()
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        return cls(**known)


class StateStore(Protocol):
    def load(self, key: str) -> dict[str, Any] | None: ...

    def save_many(self, states: dict[str, dict[str, Any]]) -> None: ...

    def delete(self, key: str) -> None: ...

    def close(self) -> None: ...


class MemoryStateStore:
    """A dict; for tests and ``kale plan``."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def load(self, key: str) -> dict[str, Any] | None:
        raw = self.data.get(key)
        return json.loads(raw) if raw is not None else None

    def save_many(self, states: dict[str, dict[str, Any]]) -> None:
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

    def save_many(self, states: dict[str, dict[str, Any]]) -> None:
        if not states:
            return
        rows = [(k, json.dumps(v, default=float)) for k, v in states.items()]
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO job_state (key, state) VALUES (?, ?)", rows
            )

    def delete(self, key: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM job_state WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
