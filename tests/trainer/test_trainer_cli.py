"""``kale train`` / ``kale profile`` at the command line: bad input is one line and exit 2;
``kale train`` stops cleanly on SIGTERM (how the Local actuator stops it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kale.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def job(job_file, unique_name):
    # A broker address nobody listens on: the cases below must fail before reaching Kafka.
    return job_file(bootstrap="127.0.0.1:9", topic=unique_name("t"), group=unique_name("g"))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["train", "--job", "/nope/job.yaml", "--workers", "2"], "file not found"),
        (["train", "--job", "{job}", "--workers", "0"], "positive integer"),
        (["train", "--job", "{job}", "--workers", "2", "--ps", "12"], "parameter blocks"),
        (["train", "--job", "{job}", "--workers", "2", "--seconds", "soon"], "--seconds"),
        (["profile", "--job", "{job}", "--workers", "1,x", "-o", "p.csv"], "positive integers"),
        (
            ["profile", "--job", "{job}", "--workers", "1", "--ps", "0", "-o", "p.csv"],
            "positive integers",
        ),
        (
            ["profile", "--job", "{job}", "--workers", "1", "--seconds", "0", "-o", "p.csv"],
            "positive duration",
        ),
        (
            ["profile", "--job", "{job}", "--workers", "1", "--warmup", "-1s", "-o", "p.csv"],
            "--warmup",
        ),
        (["profile", "--job", "{job}", "--workers", "1"], "--output"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(job, capsys, args, reason):
    code = main([a.replace("{job}", str(job)) for a in args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert reason in err


@pytest.mark.kafka
def test_train_says_in_one_line_when_kafka_or_the_topic_is_missing(
    job, kafka_broker, unique_name, capsys
):
    assert main(["train", "--job", str(job), "--workers", "1", "--seconds", "1"]) == 2
    assert "cannot reach Kafka at 127.0.0.1:9" in capsys.readouterr().err
    args = ["train", "--job", str(job), "--workers", "1", "--bootstrap", kafka_broker.bootstrap]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1


def _descendants(pid: int) -> set[int]:
    """Live descendants of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.kafka
@pytest.mark.slow
def test_train_runs_until_sigterm_then_checkpoints_and_leaves_no_process(
    kafka_broker, ctr_topic, unique_name, job_file, committed, tmp_path, wait_until
):
    topic, _ = ctr_topic(20_000, partitions=4)
    group = unique_name("group")
    job = job_file(bootstrap=kafka_broker.bootstrap, topic=topic, group=group, globalBatchSize=256)
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kale.cli.main",
            "train",
            "--job",
            str(job),
            "--workers",
            "2",
            "--ps",
            "1",
            "--json",
            "--report-every",
            "1s",
            "--checkpoint-dir",
            str(ckpt),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: list[dict] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: any(e["event"] == "throughput" and e["trained"] > 0 for e in lines),
            timeout=90,
            message="kale train to report trained samples",
        )
        family = _descendants(proc.pid)
        assert len(family) >= 4  # forkserver, 1 PS, 2 workers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    assert lines[0]["event"] == "started" and lines[-1]["event"] == "stopped"
    assert Path(lines[-1]["checkpoint"]).is_file()
    assert sum(committed(kafka_broker.bootstrap, group, topic).values()) > 0
    wait_until(
        lambda: not any(_alive(p) for p in family),
        timeout=15,
        message="every child process to exit",
    )
