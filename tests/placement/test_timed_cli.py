"""``kale place timed``: the JSON contract, the protocol, plots, and exit 2 on user mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kale.cli.main import main

CONTRACT = {"makespan_s", "mean_jct_s", "mean_wait_s", "mean_response_s", "bsld", "util",
            "restarts", "gpu_hours_lost", "failed"}  # fmt: skip


def swf(path: Path, n: int, *, procs: int = 16, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.integers(1, 60, n))
    lines = [f"; MaxNodes: {procs}\n"]
    for i in range(n):
        run, size = int(rng.integers(1, 600)), int(rng.integers(1, procs + 1))
        lines.append(f"{i + 1} {submit[i]} -1 {run} {size} -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["place", "timed", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_whole_log_run_prints_every_contract_field_per_policy(tmp_path: Path, capsys) -> None:
    log = swf(tmp_path / "w.swf", 200)
    code, out, _ = run_cli(
        ["--swf", str(log), "--queue", "fcfs,sjf", "--backfill", "--json"], capsys
    )
    assert code == 0
    doc = json.loads(out)
    assert list(doc["policies"]) == ["fcfs", "sjf"]
    for metrics in doc["policies"].values():
        assert set(metrics) >= CONTRACT and metrics["jobs"] == 200 and metrics["failed"] == 0
        assert 0 < metrics["util"] <= 1 and metrics["bsld"] >= 1
    assert doc["settings"]["processors"] == 16 and doc["settings"]["backfill"] is True


def test_the_rlscheduler_protocol_reports_the_mean_over_ten_sequences(
    tmp_path: Path, capsys
) -> None:
    log = swf(tmp_path / "lublin_like.swf", 8850 + 1024, procs=64)
    code, out, _ = run_cli(
        ["--swf", str(log), "--queue", "f1", "--protocol", "rlscheduler", "--json"], capsys
    )
    assert code == 0
    f1 = json.loads(out)["policies"]["f1"]
    assert set(f1) >= CONTRACT and len(f1["per_sequence"]) == 10 and f1["jobs"] == 10 * 1024
    assert f1["bsld"] == pytest.approx(np.mean([s["bsld"] for s in f1["per_sequence"]]))


def test_faults_and_a_plot(tmp_path: Path, capsys) -> None:
    log = swf(tmp_path / "w.swf", 120)
    rates = tmp_path / "rates.csv"
    rates.write_text("node,gpu,rate_per_hour\n*,*,1.0\n", encoding="utf-8")  # hourly
    png = tmp_path / "out" / "timed.png"
    fast = ["--checkpoint-s", "60", "--restart-s", "10", "--repair-s", "60"]
    args = ["--swf", str(log), "--faults", str(rates), *fast, "--plot", str(png), "--json"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    fcfs = json.loads(out)["policies"]["fcfs"]
    assert fcfs["restarts"] > 0 and fcfs["gpu_hours_lost"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_output_names_each_policy(tmp_path: Path, capsys) -> None:
    code, out, _ = run_cli(
        ["--swf", str(swf(tmp_path / "w.swf", 50)), "--queue", "wfp3,unicep"], capsys
    )
    assert code == 0 and "wfp3" in out and "unicep" in out and "bsld" in out


BAD = [
    # a malformed SWF row: the file and line
    (["--swf", "{bad}"], "bad.swf:2: expected 18 fields"),
    # an unknown queue policy
    (["--swf", "{good}", "--queue", "lifo"], "unknown queue policy 'lifo'"),
    # neither input
    ([], "give either --swf"),
    # both inputs
    (["--swf", "{good}", "--nodes", "n.csv", "--pods", "p.csv"], "give either --swf"),
    # nodes without pods
    (["--nodes", "n.csv"], "needs both --nodes and --pods"),
    # the protocol on a log too short for its sequences
    (["--swf", "{good}", "--protocol", "rlscheduler"], "protocol needs at least 9874 jobs"),
    # a plot of a protocol run (ten sequences, no single timeline)
    (["--swf", "{good}", "--protocol", "kale", "--plot", "x.png"], "does not apply to --protocol"),
    # node policies for a log that has only processors
    (["--swf", "{good}", "--placement", "fgd"], "an SWF log has only processors"),
    # a bad fault table row
    (["--swf", "{good}", "--faults", "{rates}"], "rates.csv:2: node: 'gpu-node' is not a node"),
    # a checkpoint interval of zero
    (["--swf", "{good}", "--faults", "default", "--checkpoint-s", "0"], "checkpoint interval"),
    # a machine of no processors
    (["--swf", "{good}", "--processors", "0"], "--processors must be 1 or more"),
    # a missing file
    (["--swf", "{missing}"], "missing.swf: no such file"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_user_mistakes_exit_2_with_one_line(
    tmp_path: Path, capsys, args: list[str], message: str
) -> None:
    (tmp_path / "bad.swf").write_text("; MaxNodes: 4\n1 0 -1 10 2\n", encoding="utf-8")
    (tmp_path / "rates.csv").write_text(
        "node,gpu,rate_per_hour\ngpu-node,0,0.1\n", encoding="utf-8"
    )
    files = {
        "bad": tmp_path / "bad.swf",
        "good": swf(tmp_path / "good.swf", 20),
        "rates": tmp_path / "rates.csv",
        "missing": tmp_path / "missing.swf",
    }
    code, out, err = run_cli([a.format(**files) for a in args], capsys)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
