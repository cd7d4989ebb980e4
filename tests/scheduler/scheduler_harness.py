"""A running ``kale scheduler`` (in-process, on its own thread) against the fake API server.

The app is built from a real ``SchedulerConfig`` and talks to the fake through the official
client, exactly as the command does; only the thread is the test's.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scheduler.app import SchedulerApp, build
from scheduler.config import parse_scheduler_config
from scheduler.faults import FaultCounts
from scheduler.objects import PodInfo
from scheduler.placers import Choice, Placer
from scheduler.view import ClusterView
from tests.support.scheduler_fakes import FakeKubeApi, wait_for


class Recording:
    """Wraps a placer and remembers every choice it made, by pod key."""

    def __init__(self, inner: Placer) -> None:
        self.inner = inner
        self.name = inner.name
        self.choices: dict[str, Choice] = {}
        self.lock = threading.Lock()

    def attach(self, view: ClusterView) -> None:
        self.inner.attach(view)

    def place(self, pod: PodInfo, eligible: Sequence[str], faults: FaultCounts) -> Choice | None:
        choice = self.inner.place(pod, eligible, faults)
        if choice is not None:
            with self.lock:
                self.choices[pod.key] = choice
        return choice


RUNNING: list[Running] = []
"""Replicas started and not yet stopped: the autouse fixture stops what a failed test left."""


class Running:
    """One scheduler replica on a thread."""

    def __init__(self, app: SchedulerApp) -> None:
        self.app = app
        self.thread = threading.Thread(target=app.run, daemon=True, name="kale-scheduler-test")
        RUNNING.append(self)
        self.thread.start()

    @property
    def scheduler(self):
        return self.app.scheduler

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the replica and wait for its threads (watches, lease) to end."""
        self.app.stop()
        self.thread.join(timeout=timeout)
        if self in RUNNING:
            RUNNING.remove(self)
        assert not self.thread.is_alive(), "the scheduler did not stop"


def stop_all() -> None:
    """Stop every replica a test left running (it failed before its own ``stop()``)."""
    while RUNNING:
        RUNNING[-1].stop()


def config(api: FakeKubeApi, tmp_path: Path, **overrides: Any) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    doc = {
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
        "policy": "first-fit",
        "metrics": {"port": 0},
        "backoff": {"initial": 0.05, "max": 0.2, "flush": 5},
        "events": {"repeat": 3600},
        "watchTimeout": 30,
    }
    doc.update(overrides)
    return parse_scheduler_config(doc)


def start_scheduler(
    api: FakeKubeApi,
    tmp_path: Path,
    *,
    placer: Placer | None = None,
    dry_run: bool = False,
    **overrides: Any,
) -> Running:
    app = build(
        config(api, tmp_path, **overrides), placer=placer, sync_events=True, dry_run=dry_run
    )
    running = Running(app)
    try:
        wait_for(app.synced, what="the scheduler's first lists")
    except AssertionError:
        running.stop()
        raise
    return running


def events(api: FakeKubeApi, reason: str, name: str | None = None) -> list[dict]:
    return [
        e
        for e in api.list("v1", "Event")
        if e["reason"] == reason and (name is None or e["involvedObject"]["name"] == name)
    ]


def node_of(api: FakeKubeApi, name: str, namespace: str = "ml") -> str | None:
    pod = api.core.pod(namespace, name)
    return None if pod is None else pod["spec"].get("nodeName")


def gpus_of(api: FakeKubeApi, name: str, namespace: str = "ml") -> str | None:
    pod = api.core.pod(namespace, name)
    return None if pod is None else pod["metadata"].get("annotations", {}).get("kale.dev/gpus")


def condition(api: FakeKubeApi, name: str, namespace: str = "ml") -> dict | None:
    """The pod's ``PodScheduled`` condition (None: it has none)."""
    pod = api.core.pod(namespace, name) or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def status_writes(api: FakeKubeApi, name: str) -> int:
    """Writes to the pod's status subresource so far."""
    return len(api.calls("PATCH", f"/pods/{name}/status"))
