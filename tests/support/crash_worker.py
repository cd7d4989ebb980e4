"""A process for the kill -9 faults (not a test): it writes until it is killed.

``python -m tests.support.crash_worker history PATH``
    appends snapshots to a history file, 50 rows per transaction, and prints the number of
    rows committed after each commit — what a reader may count on after a kill.

``python -m tests.support.crash_worker controller KUBECONFIG STATE_DIR START JOBS``
    runs the real controller (cluster mode, against the test's fake API server; SQLite state
    in STATE_DIR; synthetic traffic that rises and falls every two hours) tick after tick
    on a fake clock starting at START, 60 s per tick, and prints ``tick T`` after each.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path


def history(path: str) -> None:
    from autoscaler.kafka.history import HistoryStore, StoredSnapshot

    store = HistoryStore(path)
    t = 1_767_225_600.0 + 1000 * len(store.rows("t"))
    n = len(store.rows("t"))
    while True:
        rows = [
            StoredSnapshot(topic="t", group="g", time=t + i, end_total=int(t + i), lag=i)
            for i in range(50)
        ]
        store.append(*rows)
        t += 50
        n += 50
        print(n, flush=True)


def wave(t: float) -> float:
    period = 7200.0
    return 20_000 + 140_000 * (1 - math.cos((t % period) / period * 2 * math.pi)) / 2


def controller(kubeconfig: str, state_dir: str, start: str, jobs: str) -> None:
    from autoscaler.controller.settings import ControllerSettings
    from tests.support.fault_fakes import ClusterRig, FakeClock

    clock = FakeClock(float(start))
    rig = ClusterRig(
        None,
        Path(state_dir),
        kubeconfig=Path(kubeconfig),
        jobs=int(jobs),
        store=Path(state_dir) / "controller.sqlite",
        rate=wave,
        clock=clock,
        settings=ControllerSettings(identity="crash", act_threads=4, act_deadline_s=30),
    )
    while True:
        rig.tick()
        print(f"tick {clock():.0f}", flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"history": history, "controller": controller}[mode](*args)
