"""kill -9 in the middle of a write and in the middle of a tick: nothing committed is lost,
every file stays readable, and the restarted controller neither repeats nor forgets a resize.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.kafka.history import HistoryStore
from tests.support.fault_fakes import T0, FakeKubeApi, Objects, double_resizes, job_doc

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.support.crash_worker"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", WORKER, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_until_killed(proc: subprocess.Popen[str], lines: int) -> list[str]:
    """Read ``lines`` lines of progress, then SIGKILL; returns what was read."""
    seen: list[str] = []
    assert proc.stdout is not None
    while len(seen) < lines:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the worker exited by itself ({proc.wait()}): {err[-2000:]}")
        seen.append(line.strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return seen


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_kill_9_mid_write_loses_no_committed_history_row(tmp_path):
    path = tmp_path / "history.sqlite"
    rng = random.Random(3)
    for _ in range(2):
        seen = run_until_killed(spawn("history", str(path)), rng.randint(3, 40))
        committed = int(seen[-1])
        assert integrity(path) == "ok"
        with HistoryStore(path) as store:
            assert len(store.rows("t")) >= committed  # a kill loses nothing committed
            assert len(store.rows("t")) % 50 == 0  # and leaves no half transaction


@pytest.mark.slow
def test_kill_9_mid_tick_then_restart_finishes_resizes_once(tmp_path):
    with FakeKubeApi() as api:
        objs = Objects("ml")
        for i in range(3):
            api.put(objs.statefulset(f"job{i}-worker", 1, gpus=1))
            api.put(objs.statefulset(f"job{i}-ps", 1))
            api.put(
                job_doc(
                    f"job{i}",
                    target={"kind": "StatefulSet", "workers": f"job{i}-worker", "ps": f"job{i}-ps"},
                    model="ctr-sync.json",
                )
            )
        kubeconfig = api.kubeconfig(tmp_path / "kc")
        start = T0 + 86400
        rng = random.Random(5)
        for _ in range(2):  # kill at a random tick, restart where the clock was
            seen = run_until_killed(
                spawn("controller", str(kubeconfig), str(tmp_path), str(start), "3"),
                rng.randint(5, 25),
            )
            start = float(seen[-1].split()[1]) + 60
        state = tmp_path / "controller.sqlite"
        assert integrity(state) == "ok"
        conn = sqlite3.connect(state)
        rows = conn.execute("SELECT key, state FROM job_state").fetchall()
        conn.close()
        assert {k for k, _ in rows} == {"ml/job0", "ml/job1", "ml/job2"}
        for _, raw in rows:
            json.loads(raw)
        assert double_resizes(api) == 0
        assert api.calls("PUT", "/scale"), "the load never made the controller resize"
