"""``kale simulate --placement``: how many workers (autoscaling) and where (placement)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from autoscaler.sim.placement_replay import PlacementSettings, replay_workers
from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import save_trace
from kale.cli import main as cli_main


@pytest.fixture
def files(tmp_path):
    from throughput.model import ThroughputModel

    ThroughputModel(
        family="fixed-ratio",
        mode="sync",
        theta=(0.05, 2.0, 0.002),
        global_batch=4096,
        ratio=4,
        min_workers=1,
        max_workers=64,
    ).save(tmp_path / "m.json")
    job = {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": "ctr"},
        "spec": {
            "source": {
                "kafka": {
                    "bootstrapServers": ["127.0.0.1:9092"],
                    "topic": "t",
                    "consumerGroup": "g",
                }
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": 4,
                "minWorkers": 1,
                "maxWorkers": 64,
            },
            "slo": {"maxDelay": "10m"},
            "rescale": {"duration": "5m"},
            "throughput": {"model": "m.json"},
            "forecast": {"interval": "5m", "horizon": "1h"},
            "target": {"kind": "DryRun"},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    save_trace(generate_trace(days=2, interval_s=300, seed=7), tmp_path / "t.csv")
    return str(tmp_path / "job.yaml"), str(tmp_path / "t.csv")


def test_simulate_reports_where_each_policys_workers_went(files, capsys):
    job, trace = files
    args = [
        "simulate",
        "--trace",
        trace,
        "--job",
        job,
        "--policies",
        "static,hpa",
        "--warmup-days",
        "1",
        "--scale-peak",
        "0.8",
        "--placement",
        "bestfit",
    ]
    assert cli_main.main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # every simulated schedule is placed, the offline optimum's included
    assert set(data["placement"]) == {"static", "hpa", "optimal"}
    for where in data["placement"].values():
        assert where["policy"] == "bestfit" and where["max_nodes_used"] >= 1
        assert 0 < where["final_gpu_allocation_share"] <= 1
    assert data["placement"]["static"]["resizes"] <= 1
    assert cli_main.main(args) == 0
    assert "where (placement: bestfit)" in capsys.readouterr().out


def test_a_bad_placement_policy_is_one_line(files, capsys):
    job, trace = files
    code = cli_main.main(["simulate", "--trace", trace, "--job", job, "--placement", "nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--placement: unknown policy 'nope'" in err[0]


def test_workers_that_do_not_fit_stay_pending_and_scale_down_frees_them():
    settings = PlacementSettings(policy="fgd", nodes=8, background=0.7, seed=3)
    out = replay_workers(np.array([1, 2, 40, 40, 2]), 1, settings)
    assert out["pending_worker_steps"] > 0  # 40 one-GPU workers cannot fit on a full cluster
    assert out["resizes"] == 3 and out["max_nodes_used"] >= 1
