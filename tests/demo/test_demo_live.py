"""`kale demo` for real, shortened: broker, replay, controller, worker processes, dashboard.

Each run is a separate ``kale`` process, as a user would start it. Afterwards nothing of it
may be left: no worker process, no broker process, no listening port — also when it is
stopped with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.kafka]
ROOT = Path(__file__).resolve().parents[2]


def start_demo(state: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "kale.cli.main",
        "demo",
        "--no-browser",
        "--port",
        "0",
        "--state",
        str(state),
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


class Lines:
    """stderr of the demo, read on a thread; ``wait_for(pattern)`` returns the match."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, pattern: str, timeout: float = 180.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    m = re.search(pattern, line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{pattern!r} not printed; stderr: {self.text}")
                self.cond.wait(left)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def leftovers(state: Path, broker_port: str) -> list[str]:
    """Processes whose command line names this run's state folder or broker port."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(state) in cmd or f"127.0.0.1:{broker_port}" in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def finish(proc: subprocess.Popen[str], lines: Lines, timeout: float) -> str:
    """Wait for the exit; stdout (the summary: far less than a pipe buffer) is read after."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"the demo did not finish in {timeout}s: {lines.text}") from None
    lines.thread.join(5)
    assert proc.stdout is not None
    return proc.stdout.read()


def assert_nothing_left(state: Path, lines: Lines) -> None:
    broker_port = lines.wait_for(r"broker 127\.0\.0\.1:(\d+)", 1).group(1)
    dash_port = int(lines.wait_for(r"dashboard: http://127\.0\.0\.1:(\d+)/", 1).group(1))
    deadline = time.monotonic() + 30  # the kernel may take a moment to reap (longer when busy)
    while leftovers(state, broker_port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(state, broker_port) == []
    assert not listening(int(broker_port)) and not listening(dash_port)


def test_a_short_demo_runs_to_its_summary_and_leaves_nothing_behind(tmp_path):
    state = tmp_path / "state"
    proc = start_demo(state, "--minutes", "0.2")
    lines = Lines(proc)
    out = finish(proc, lines, timeout=240)  # ~30 s idle; a guard against a hang, not a target
    assert proc.returncode == 0, lines.text
    assert re.search(r"^kale-live\s+\d", out, re.M), out
    assert re.search(r"^hpa\s+\d", out, re.M) and re.search(r"^kale\s+\d", out, re.M)
    assert "violations" in out and "lower bound" in out
    assert "[3/3]" in lines.text
    assert_nothing_left(state, lines)
    # The run is kept for `kale dashboard --state`: its comparison names the live run.
    result = json.loads((state / "simulation.json").read_text())
    # About twelve one-second ticks on an idle machine; a busy one may skip some.
    assert result["policies"]["kale-live"]["steps"] >= 2
    assert result["series"]["policies"]["kale-live"]["time"]
    # ... and where the simulated policies' workers would land (kale scheduler's FGD)
    assert "where their workers land (fgd" in out
    assert result["placement"]["hpa"]["policy"] == "fgd"


def test_ctrl_c_stops_everything_and_still_prints_the_summary(tmp_path):
    state = tmp_path / "state"
    proc = start_demo(state, "--minutes", "3")
    lines = Lines(proc)
    try:
        url = lines.wait_for(r"dashboard: (http://\S+)").group(1)
        lines.wait_for(r"\[2/3\] live")
        # The dashboard serves the live controller's jobs while the demo runs.
        deadline = time.monotonic() + 60
        jobs: list = []
        while not jobs and time.monotonic() < deadline:
            with urllib.request.urlopen(url + "api/jobs", timeout=5) as r:
                jobs = json.loads(r.read())["jobs"]
            time.sleep(0.5)
        assert jobs and jobs[0]["key"] == "demo/ctr-model", lines.text
        assert jobs[0]["workers"] >= 1
        lines.wait_for(r"day\s+[\d.]+/")  # the first progress line: ten seconds of replay
        proc.send_signal(signal.SIGINT)
        out = finish(proc, lines, timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, lines.text
    assert "(interrupted)" in out and re.search(r"^kale-live\s+\d", out, re.M), out
    assert "stopping: replay, controller" in lines.text
    assert_nothing_left(state, lines)
