"""Local actuator: N worker processes with their place in the job, stopped without leftovers."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.local import LocalActuator, render
from kube.errors import TargetRejected

WORKER = """
import json, os, signal, sys, time
out = sys.argv[1]
info = {k: os.environ[k] for k in ("KALE_WORKER_INDEX", "KALE_WORKERS", "KALE_PS", "KALE_JOB")}
info["argv"] = sys.argv[2:]
info["pid"] = os.getpid()
# Written whole or not at all (temp file + rename): the test globs and parses it while
# the worker may still be writing.
final = os.path.join(out, f"w{info['KALE_WORKER_INDEX']}-{os.getpid()}.json")
with open(final + ".part", "w") as f:
    json.dump(info, f)
os.replace(final + ".part", final)
if "stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "spawn" in sys.argv:
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.path.join(out, f"child-{child.pid}"), "w"):
        pass
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped or defunct.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def started(out: Path, n: int):
    return wait_for(lambda: len(list(out.glob("w*.json"))) >= n)


@pytest.fixture()
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


def test_placeholders_are_filled_and_other_braces_kept():
    cmd = render(
        ["train", "--rank={index}", "--world={workers}", "--ps={ps}", "{job}", "{x}"],
        index=2,
        size=Size(4, 1),
        job="ctr",
    )
    assert cmd == ["train", "--rank=2", "--world=4", "--ps=1", "ctr", "{x}"]
    assert render(["{python}", "-m", "x"], index=0, size=Size(1, 1), job="j")[0] == sys.executable


def test_starts_workers_with_their_place_in_the_job(out):
    act = LocalActuator(
        [sys.executable, "-c", WORKER, str(out), "--rank={index}"], job="ctr", grace_s=2
    )
    try:
        assert act.current() == Size(0, 0)
        act.apply(Size(3, 1))
        assert started(out, 3)
        infos = sorted(
            (json.loads(p.read_text()) for p in out.glob("w*.json")),
            key=lambda i: i["KALE_WORKER_INDEX"],
        )
        assert [i["KALE_WORKER_INDEX"] for i in infos] == ["0", "1", "2"]
        assert {i["KALE_WORKERS"] for i in infos} == {"3"}
        assert {i["KALE_PS"] for i in infos} == {"1"}
        assert {i["KALE_JOB"] for i in infos} == {"ctr"}
        assert [i["argv"] for i in infos] == [["--rank=0"], ["--rank=1"], ["--rank=2"]]
        assert act.current() == Size(3, 1)
    finally:
        act.close()


def test_resize_restarts_every_worker_with_the_new_world_size(out):
    act = LocalActuator([sys.executable, "-c", WORKER, str(out)], grace_s=2)
    try:
        act.apply(Size(2, 1))
        assert started(out, 2)
        first = act.pids
        act.apply(Size(4, 1))
        assert started(out, 6)
        assert not any(alive(p) for p in first)
        assert len(act.pids) == 4 and set(act.pids).isdisjoint(first)
    finally:
        act.close()
    assert act.current() == Size(0, 0)


def test_per_job_runs_one_process_that_gets_the_whole_size(out):
    """``processes: perJob``: one process (``kale train --workers {workers} --ps {ps}``)
    starts the job's own workers and PS; a resize restarts it with the new size."""
    act = LocalActuator(
        [sys.executable, "-c", WORKER, str(out), "--workers={workers}", "--ps={ps}"],
        job="ctr",
        grace_s=2,
        per_job=True,
    )
    try:
        act.apply(Size(3, 1))
        assert started(out, 1)
        assert len(act.pids) == 1
        (info,) = [json.loads(p.read_text()) for p in out.glob("w*.json")]
        assert info["argv"] == ["--workers=3", "--ps=1"] and info["KALE_WORKERS"] == "3"
        assert act.current() == Size(3, 1)
        first = act.pids[0]
        act.apply(Size(5, 2))
        assert started(out, 2) and len(act.pids) == 1 and not alive(first)
        assert act.current() == Size(5, 2)
        os.kill(act.pids[0], 9)
        assert wait_for(lambda: act.current() == Size(0, 0))  # the job is gone, not 4 of 5
    finally:
        act.close()


PER_JOB = """
import os, signal, subprocess, sys, time
out = sys.argv[1]
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(os.path.join(out, f"helper-{helper.pid}"), "w").close()
def term(sig, frame):
    # An orderly stop needs the helper alive until the end (a trainer's forkserver).
    alive = helper.poll() is None
    open(os.path.join(out, "stopped-" + ("clean" if alive else "helper-died")), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(os.path.join(out, "ready"), "w").close()
time.sleep(60)
"""


def test_per_job_stop_signals_the_job_process_only_and_reaps_its_helpers(out):
    act = LocalActuator([sys.executable, "-c", PER_JOB, str(out)], grace_s=5, per_job=True)
    try:
        act.apply(Size(2, 1))
        assert wait_for(lambda: (out / "ready").exists())
        (helper,) = [int(p.name.split("-")[1]) for p in out.glob("helper-*")]
    finally:
        act.close()
    assert (out / "stopped-clean").exists()
    assert wait_for(lambda: not alive(helper))  # the group's leftovers are SIGKILLed


def test_same_size_restarts_nothing(out):
    act = LocalActuator([sys.executable, "-c", WORKER, str(out)], grace_s=2)
    try:
        act.apply(Size(1, 1))
        pids = act.pids
        act.apply(Size(1, 1))
        assert act.pids == pids
    finally:
        act.close()


def test_sigterm_then_sigkill_and_no_leftover_children(out):
    act = LocalActuator([sys.executable, "-c", WORKER, str(out), "stubborn", "spawn"], grace_s=0.5)
    act.apply(Size(2, 1))
    assert started(out, 2)
    assert wait_for(lambda: len(list(out.glob("child-*"))) == 2)
    pids = act.pids
    children = [int(p.name.split("-")[1]) for p in out.glob("child-*")]
    t0 = time.monotonic()
    act.close()
    assert time.monotonic() - t0 >= 0.5  # waited the grace period for the stubborn ones
    assert not any(alive(p) for p in pids)
    assert wait_for(lambda: not any(alive(c) for c in children), timeout=5)


def test_a_worker_that_died_shows_up_as_a_smaller_size(out):
    act = LocalActuator([sys.executable, "-c", WORKER, str(out)], grace_s=2)
    try:
        act.apply(Size(2, 1))
        assert started(out, 2)
        os.kill(act.pids[0], 9)
        assert wait_for(lambda: act.current() == Size(1, 1))
        act.apply(Size(2, 1))  # the controller's level-triggered repair
        assert act.current() == Size(2, 1)
    finally:
        act.close()


def test_a_command_that_cannot_start_is_rejected(tmp_path):
    act = LocalActuator([str(tmp_path / "missing-binary")], grace_s=1)
    with pytest.raises(TargetRejected, match="cannot start"):
        act.apply(Size(2, 1))
    assert act.current() == Size(0, 0)


def test_empty_command_is_rejected():
    with pytest.raises(TargetRejected, match="empty"):
        LocalActuator([])
