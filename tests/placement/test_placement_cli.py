"""``kale place simulate``: the JSON contract, the table, the plot, and one-line exit-2 errors."""

from __future__ import annotations

import json

import pytest

from kale.cli import main as cli_main
from placement.workloads.generate import generate_nodes, generate_pods
from placement.workloads.openb import load_nodes, load_pods, write_nodes, write_pods


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    folder = tmp_path_factory.mktemp("openb")
    nodes, pods = folder / "nodes.csv", folder / "pods.csv"
    write_nodes(nodes, generate_nodes(60, seed=4))
    write_pods(pods, generate_pods(500, seed=4))
    return str(nodes), str(pods)


def run(capsys, *args):
    code = cli_main.main(["place", "simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_written_workload_reads_back(workload):
    nodes, pods = workload
    assert load_nodes(nodes) == generate_nodes(60, seed=4)
    assert load_pods(pods) == generate_pods(500, seed=4)


def test_json_contract(workload, capsys):
    nodes, pods = workload
    code, out, _ = run(
        capsys, "--nodes", nodes, "--pods", pods, "--policies", "bestfit,packing",
        "--seeds", "1-2", "--json",
    )  # fmt: skip
    assert code == 0
    result = json.loads(out)
    assert list(result["policies"]) == ["bestfit", "packing"]
    for summary in result["policies"].values():
        assert {"final", "at100", "curve", "failed_pods", "per_seed"} <= set(summary)
        assert "130" in summary["curve"] and all(0 <= int(c) <= 130 for c in summary["curve"])
        finals = [s["final"] for s in summary["per_seed"]]
        assert [s["seed"] for s in summary["per_seed"]] == [1, 2]
        assert summary["final"] == pytest.approx(sum(finals) / 2, abs=1e-3)
        assert summary["curve"]["130"] == pytest.approx(summary["final"], abs=1e-3)
        assert 0 < summary["final"] <= 100 and summary["failed_pods"] >= 0


def test_table_and_plot(workload, capsys, tmp_path):
    nodes, pods = workload
    png = tmp_path / "alloc.png"
    code, out, _ = run(
        capsys, "--nodes", nodes, "--pods", pods, "--policies", "random,fgd", "--seeds", "3",
        "--plot", str(png),
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["policy", "final_%", "at100_%"]
    assert [line.split()[0] for line in lines[2:]] == ["random", "fgd"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--policies", "bestfit,tetris"], "unknown policy 'tetris'; known: random, dotprod"),
        (["--seeds", "9-1"], "bad seed list '9-1'"),  # a backwards range
        (["--seeds", "x"], "bad seed list"),  # not a number
        (["--tune", "0"], "--tune"),  # must be positive
        (["--nodes", "/nonexistent/nodes.csv"], "nodes.csv: no such file"),
        (["--plot", "/nonexistent/dir/a.png"], "cannot write the plot"),
    ],
)
def test_user_errors_exit_2_with_one_line(workload, capsys, args, words):
    nodes, pods = workload
    base = {"--nodes": nodes, "--pods": pods, "--seeds": "1", "--policies": "bestfit"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code, _, err = run(capsys, *[x for kv in base.items() for x in kv])
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_bad_row_names_file_and_line(workload, capsys, tmp_path):
    nodes, _ = workload
    bad = tmp_path / "pods.csv"
    bad.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,10,1,500\np2,1000,10,3,40\n"
    )
    code, _, err = run(capsys, "--nodes", nodes, "--pods", str(bad), "--seeds", "1")
    assert code == 2 and f"{bad}:3: gpu_milli" in err and len(err.strip().splitlines()) == 1


def test_help_lists_simulate(capsys):
    assert cli_main.main(["place", "--help"]) == 0
    assert "simulate" in capsys.readouterr().out
