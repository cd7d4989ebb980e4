"""The embedded tansu broker: starts bounded, answers Kafka, never outlives its owner."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autoscaler.kafka import clients
from autoscaler.kafka.local.broker import EmbeddedBroker

pytestmark = pytest.mark.kafka


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def read_line(stream, timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"no line within {timeout}s") from None


def test_the_session_broker_answers_kafka_requests(kafka_broker, topic_name):
    assert kafka_broker.bootstrap.startswith("127.0.0.1:")
    assert clients.ensure_topic(kafka_broker.bootstrap, topic_name, 2) == 2


def test_a_broker_is_stopped_even_when_the_block_raises(tmp_path):
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log")
    with pytest.raises(RuntimeError, match="boom"), broker:
        pid = broker.pid
        assert pid is not None and alive(pid)
        raise RuntimeError("boom")
    assert not alive(pid)
    assert "listening on" in (tmp_path / "tansu.log").read_text()


def test_a_busy_port_is_a_clear_start_error(kafka_broker, tmp_path):
    from autoscaler.kafka.local.broker import BrokerStartError

    port = int(kafka_broker.bootstrap.rsplit(":", 1)[1])
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log", start_timeout_s=10)
    with pytest.raises(BrokerStartError, match=f"port {port} on 127.0.0.1 is already in use"):
        broker.start()
    assert not broker.running()


def test_a_killed_owner_takes_its_broker_along(tmp_path, wait_until):
    script = (
        "import sys, time\n"
        "from autoscaler.kafka.local.broker import EmbeddedBroker\n"
        "b = EmbeddedBroker().start()\n"
        "print(b.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        tansu = int(read_line(owner.stdout, timeout=60))
        assert alive(tansu)
        owner.kill()  # no atexit, no finally: only PR_SET_PDEATHSIG can clean up
        owner.wait(10)
        wait_until(lambda: not alive(tansu), timeout=20, message="tansu exiting with its owner")
    finally:
        if owner.poll() is None:
            owner.kill()


def test_kale_broker_prints_bootstrap_and_stops_cleanly_on_sigint(tmp_path, wait_until):
    log = tmp_path / "tansu.log"
    kale = subprocess.Popen(
        [sys.executable, "-m", "kale.cli.main", "broker", "--log", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(kale.stdout, timeout=60).rstrip("\n")
        assert line.startswith("bootstrap: 127.0.0.1:"), line
        bootstrap = line.split(": ", 1)[1]
        assert clients.ensure_topic(bootstrap, "hello", 1) == 1
        tansu = children(kale.pid)
        assert len(tansu) == 1 and alive(tansu[0])
        kale.send_signal(signal.SIGINT)
        assert kale.wait(30) == 0, kale.stderr.read()
        assert kale.stdout.read() == ""  # exactly one line on stdout
        assert not alive(tansu[0])
    finally:
        if kale.poll() is None:
            os.kill(kale.pid, signal.SIGKILL)
            kale.wait(10)
