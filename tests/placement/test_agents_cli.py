"""``kale place train`` and ``agent:PATH`` through the CLI, on tiny generated workloads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kale.cli import main as cli_main
from placement.queue.priorities import queue_policy
from placement.queue.rlscheduler import simulate
from placement.workloads.generate import generate_nodes, generate_pods
from placement.workloads.openb import write_nodes, write_pods
from tests.placement.agent_fixtures import tiny_jobs, write_swf


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    root = tmp_path_factory.mktemp("agents")
    nodes, pods = root / "nodes.csv", root / "pods.csv"
    write_nodes(nodes, generate_nodes(16, seed=1))
    write_pods(pods, generate_pods(90, seed=2))
    swf = write_swf(root / "jobs.swf", tiny_jobs(150, seed=3), 16)
    return root, nodes, pods, swf


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.exit_code, self.output, self.stderr = code, out, err


TINY_TRAINING = {
    "balance_dqn": ["imitation.episodes=1", "imitation.steps=20", "validate_every=0"],
    "tr_dqn": [
        "imitation.episodes=1",
        "imitation.steps=20",
        "synthetic_sequences=2",
        "sequences=8",
        "validate_every=0",
    ],
}
"""Each agent's shipped training, shrunk to what a test can afford (warm start, data and
validation; the episodes are the test's)."""


def tiny(args: tuple[str, ...]) -> list[str]:
    """``args``, with the tiny training settings added to a ``kale place train``."""
    if args[:2] != ("place", "train") or "--agent" not in args:
        return list(args)
    name = args[args.index("--agent") + 1]
    return [*args, *(x for item in TINY_TRAINING.get(name, []) for x in ("--set", item))]


@pytest.fixture
def run(capsys):
    def invoke(*args: str) -> Result:
        code = cli_main.main(tiny(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return invoke


@pytest.mark.training
def test_train_then_simulate_with_the_agent_beside_heuristics(workload, run):
    root, nodes, pods, _ = workload
    out, plot = root / "balance.pt", root / "curve.png"
    result = run(
        "place",
        "train",
        "--agent",
        "balance_dqn",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--episodes",
        "2",
        "-o",
        str(out),
        "--json",
        "--plot",
        str(plot),
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["agent"] == "balance_dqn" and summary["episodes"] == 2
    assert out.stat().st_size < 1_000_000 and plot.stat().st_size > 0
    name = f"agent:{out}"
    result = run(
        "place",
        "simulate",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policies",
        f"bestfit,{name}",
        "--seeds",
        "1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    policies = json.loads(result.output)["policies"]
    assert set(policies) == {"bestfit", name}
    assert 0 < policies[name]["final"] <= 100


@pytest.mark.training
def test_train_a_queue_agent_on_an_swf_log_and_run_it_as_a_queue_policy(workload, run):
    root, _, _, swf = workload
    out = root / "tr.pt"
    result = run(
        "place",
        "train",
        "--agent",
        "tr_dqn",
        "--swf",
        str(swf),
        "--episodes",
        "2",
        "-o",
        str(out),
        "--reward",
        "util",
    )
    assert result.exit_code == 0, result.output
    policy = queue_policy(f"agent:{out}")
    run = simulate(tiny_jobs(60, seed=9), processors=16, policy=policy, backfill=True)
    assert not np.isnan(run.start_s).any()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"not a checkpoint", "not a readable agent file"),  # garbage bytes
        (b"", "not a readable agent file"),  # empty file
    ],
)
def test_a_corrupt_agent_file_is_one_line_and_exit_2(workload, run, content, expected):
    root, nodes, pods, _ = workload
    bad = root / "bad.pt"
    bad.write_bytes(content)
    result = run(
        "place",
        "simulate",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policies",
        f"agent:{bad}",
        "--seeds",
        "1",
    )
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr


@pytest.mark.training
def test_a_missing_or_wrong_kind_agent_is_exit_2(workload, run, tmp_path):
    _, nodes, pods, swf = workload
    args = ["place", "simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1"]
    result = run(*args, "--policies", f"agent:{tmp_path}/none.pt")
    assert result.exit_code == 2 and "no such agent file" in result.stderr
    queue_agent = tmp_path / "tr.pt"
    assert (
        run(
            "place",
            "train",
            "--agent",
            "tr_dqn",
            "--swf",
            str(swf),
            "--episodes",
            "1",
            "-o",
            str(queue_agent),
        ).exit_code
        == 0
    )
    result = run(*args, "--policies", f"agent:{queue_agent}")
    assert result.exit_code == 2 and "queue-level agent" in result.stderr


@pytest.mark.training
def test_train_needs_the_right_data(workload, run):
    _, nodes, pods, _ = workload
    result = run(
        "place",
        "train",
        "--agent",
        "tr_dqn",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "-o",
        "x.pt",
    )
    assert result.exit_code == 2 and "SWF" in result.stderr


@pytest.mark.training
def test_agents_run_in_kale_place_timed_beside_heuristics(workload, run):
    root, nodes, pods, swf = workload
    queue_agent, node_agent = root / "timed-tr.pt", root / "timed-balance.pt"
    assert (
        run(
            "place",
            "train",
            "--agent",
            "tr_dqn",
            "--swf",
            str(swf),
            "--episodes",
            "1",
            "-o",
            str(queue_agent),
        ).exit_code
        == 0
    )
    assert (
        run(
            "place",
            "train",
            "--agent",
            "balance_dqn",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--episodes",
            "1",
            "-o",
            str(node_agent),
        ).exit_code
        == 0
    )
    result = run(
        "place",
        "timed",
        "--swf",
        str(swf),
        "--queue",
        f"sjf,agent:{queue_agent}",
        "--backfill",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    policies = json.loads(result.output)["policies"]
    assert len(policies) == 2 and all(p["failed"] == 0 for p in policies.values())
    result = run(
        "place",
        "timed",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--queue",
        f"agent:{queue_agent}",
        "--placement",
        f"bestfit,agent:{node_agent}",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.output)["policies"]) == 2


@pytest.mark.training
def test_device_cuda_trains_there_or_says_why_not(workload, run):
    import torch

    root, _, _, swf = workload
    out = root / "cuda.pt"
    result = run(
        "place",
        "train",
        "--agent",
        "tr_dqn",
        "--swf",
        str(swf),
        "--episodes",
        "1",
        "-o",
        str(out),
        "--device",
        "cuda",
    )
    if torch.cuda.is_available():
        assert result.exit_code == 0 and out.exists()
    else:
        assert result.exit_code == 2 and "no CUDA device" in result.stderr and not out.exists()
