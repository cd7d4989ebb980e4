"""Workload families: seeded and deterministic, on target, in files the simulators read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kale.cli import main as cli_main
from placement.errors import PlacementInputError
from placement.workloads.batch import batch_jobs_from_swf, write_swf
from placement.workloads.families import (
    NAMED,
    TRAINING_BOX,
    TRAINING_LOADS,
    LublinFamily,
    OpenbFamily,
    generate_lublin_family,
    generate_openb,
    measure_mix,
    offered_load,
    parse_family,
)
from placement.workloads.generate import WorkloadShape, generate_nodes, generate_pods
from placement.workloads.openb import load_nodes, load_pods, write_nodes, write_pods
from placement.workloads.swf import load_swf

OPENB_FAMILIES = [n for n, parts in NAMED.items() if not parts.startswith("lublin")]


@pytest.fixture(scope="module")
def source():
    """An openb-shaped source with every kind of pod (a few multi-GPU ones, as the trace)."""
    shape = WorkloadShape(cpu_only=0.13, sharing=0.4, one_gpu=0.45, multi_gpu=0.02)
    return generate_nodes(120, seed=3), generate_pods(3000, seed=3, shape=shape)


@pytest.fixture(scope="module")
def files(source, tmp_path_factory):
    folder = tmp_path_factory.mktemp("source")
    nodes, pods = folder / "nodes.csv", folder / "pods.csv"
    write_nodes(nodes, source[0])
    write_pods(pods, source[1])
    return str(nodes), str(pods)


@pytest.mark.parametrize("family", [*OPENB_FAMILIES, "train-mix", "sharing-0.7+nodes-0.5"])
def test_openb_families_are_deterministic_per_seed(source, family):
    first = generate_openb(family, *source, seed=5)
    again = generate_openb(family, *source, seed=5)
    other = generate_openb(family, *source, seed=6)
    assert first.pods == again.pods and first.nodes == again.nodes
    assert first.pods != other.pods


@pytest.mark.parametrize("family", [*OPENB_FAMILIES, "train-mix"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_four_proportions_hit_their_targets(source, family, seed):
    made = generate_openb(family, *source, seed=seed)
    realised = measure_mix(made.pods)
    assert realised == made.realised
    for axis, target in made.targets.items():
        assert realised[axis] == pytest.approx(target, abs=0.02), axis
    fam = parse_family(family)
    assert isinstance(fam, OpenbFamily)
    for axis in ("sharing", "multi_gpu", "constrained", "cpu_only_cpu"):
        asked = getattr(fam.mix, axis)
        expected = measure_mix(source[1])[axis] if asked is None else asked
        if not fam.random_mix:
            assert made.targets[axis] == pytest.approx(expected)


def test_train_mix_draws_inside_the_box_and_the_heavy_families_lie_outside(source):
    for seed in range(20):
        targets = generate_openb("train-mix", *source, seed=seed).targets
        for axis, (low, high) in TRAINING_BOX.items():
            assert low <= targets[axis] <= high
    heavy = {
        "sharing-heavy": "sharing",
        "multi-gpu-heavy": "multi_gpu",
        "cpu-heavy": "cpu_only_cpu",
        "model-constrained": "constrained",
    }
    for family, axis in heavy.items():
        fam = parse_family(family)
        assert isinstance(fam, OpenbFamily)
        assert getattr(fam.mix, axis) > TRAINING_BOX[axis][1]


def test_every_constrained_pod_names_a_model_some_node_of_the_cluster_can_give(source):
    made = generate_openb("model-constrained+nodes-0.5", *source, seed=2)
    assert len(made.nodes) == 60
    constrained = [p for p in made.pods if p.gpu_models]
    assert constrained
    for pod in constrained:
        assert any(
            n.model in pod.gpu_models
            and n.gpus >= pod.num_gpu
            and n.cpu_milli >= pod.cpu_milli
            and n.memory_mib >= pod.memory_mib
            for n in made.nodes
        )


def test_cluster_sizes_scale_the_nodes_and_the_gpu_pods(source):
    nodes, pods = source
    gpu_pods = sum(p.is_gpu for p in pods)
    quarter = generate_openb("small-cluster", nodes, pods, seed=1)
    double = generate_openb("nodes-2", nodes, pods, seed=1)
    assert len(quarter.nodes) == 30 and len(double.nodes) == 240
    assert len({n.name for n in double.nodes}) == 240
    assert sum(p.is_gpu for p in quarter.pods) == round(gpu_pods / 4)
    assert sum(p.is_gpu for p in double.pods) == 2 * gpu_pods


def test_every_generated_pod_is_a_request_of_the_source(source):
    shapes = {(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in source[1]}
    made = generate_openb("multi-gpu-heavy", *source, seed=4)
    assert {(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) for p in made.pods} <= shapes
    times = [p.creation_time for p in made.pods]
    assert times == sorted(times)


def test_lublin_families_are_deterministic_and_at_their_load():
    family = "lublin-load-0.7+procs-128"
    first = generate_lublin_family(family, seed=3, jobs=600)
    again = generate_lublin_family(family, seed=3, jobs=600)
    assert np.array_equal(first.jobs.submit_s, again.jobs.submit_s)
    assert np.array_equal(first.jobs.run_s, again.jobs.run_s)
    assert first.processors == 128 and int(first.jobs.size.max()) <= 128
    long_run = generate_lublin_family(family, seed=3, jobs=6000)
    assert long_run.realised_load == pytest.approx(0.7, rel=0.15)
    heavier = generate_lublin_family("lublin-load-1.0+procs-128", seed=3, jobs=6000)
    assert heavier.realised_load > long_run.realised_load
    for seed in range(10):
        drawn = generate_lublin_family("train-lublin", seed=seed, jobs=50)
        assert drawn.target_load is not None
        assert TRAINING_LOADS[0] <= drawn.target_load <= TRAINING_LOADS[1]


def test_swf_files_read_back_to_the_same_jobs(tmp_path):
    made = generate_lublin_family("lublin-load-0.9", seed=1, jobs=300)
    path = tmp_path / "jobs.swf"
    write_swf(path, made.jobs, processors=made.processors, comments=["test"])
    trace = load_swf(path)
    back = batch_jobs_from_swf(trace)
    assert trace.processors == 256
    for name in ("job_id", "submit_s", "run_s", "estimate_s", "size"):
        assert np.array_equal(getattr(back, name), getattr(made.jobs, name)), name
    assert offered_load(back, 256) == pytest.approx(made.realised_load)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nope", "unknown workload family 'nope'"),
        ("sharing-x", "is not a number"),
        ("sharing-1.5", "sharing must be in [0, 1)"),
        ("lublin-load-0.8+sharing-0.5", "a Lublin family has only a load and procs"),
        ("nodes-0", "node share"),
    ],
)
def test_bad_family_names_say_why(text, words):
    with pytest.raises(PlacementInputError, match=None) as info:
        parse_family(text)
    assert words in str(info.value)


def test_family_kinds():
    assert isinstance(parse_family("lublin"), LublinFamily)
    assert parse_family("lublin").load is None  # type: ignore[union-attr]
    assert isinstance(parse_family("cpu-heavy"), OpenbFamily)


def cli(capsys, *args):
    code = cli_main.main(["place", "workloads", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_writes_files_the_simulators_read(files, capsys, tmp_path):
    nodes, pods = files
    out = tmp_path / "sharing"
    args = ["--family", "sharing-heavy+nodes-0.5", "--seed", "7", "--nodes", nodes]
    code, text, _ = cli(capsys, "generate", *args, "--pods", pods, "-o", str(out), "--json")
    assert code == 0
    manifest = json.loads(text)
    assert manifest == json.loads((out / "workload.json").read_text())
    assert manifest["kind"] == "openb" and manifest["seed"] == 7
    assert manifest["realised"]["sharing"] == pytest.approx(0.8, abs=0.02)
    generated = load_pods(out / "pods.csv")
    assert len(load_nodes(out / "nodes.csv")) == manifest["nodes"] == 60
    assert measure_mix(generated) == pytest.approx(manifest["realised"], abs=1e-4)
    first = (out / "pods.csv").read_bytes()
    again = tmp_path / "again"
    cli(capsys, "generate", *args, "--pods", pods, "-o", str(again))
    assert (again / "pods.csv").read_bytes() == first
    simulate = ["place", "simulate", "--nodes", str(out / "nodes.csv"), "--pods"]
    simulate += [str(out / "pods.csv"), "--policies", "bestfit", "--seeds", "1", "--json"]
    assert cli_main.main(simulate) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 < result["policies"]["bestfit"]["final"] <= 100


def test_generate_a_lublin_sequence_and_run_it(capsys, tmp_path):
    out = tmp_path / "lublin"
    code, text, _ = cli(
        capsys, "generate", "--family", "lublin-load-0.8", "--seed", "2", "--jobs", "200",
        "-o", str(out),
    )  # fmt: skip
    assert code == 0 and "jobs.swf" in text
    manifest = json.loads((out / "workload.json").read_text())
    assert manifest["kind"] == "lublin" and manifest["jobs"] == 200
    timed = ["place", "timed", "--swf", str(out / "jobs.swf"), "--queue", "sjf", "--json"]
    assert cli_main.main(timed) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["sjf"]["jobs"] == 200


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--family", "nope", "--seed", "1"], "unknown workload family"),
        (["--family", "cpu-heavy", "--seed", "1"], "give the source --nodes and --pods"),
    ],
)
def test_generate_errors_are_one_line_and_exit_2(capsys, tmp_path, args, words):
    code, _, err = cli(capsys, "generate", *args, "-o", str(tmp_path / "x"))
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_list_names_every_family(capsys):
    code, out, _ = cli(capsys, "list", "--json")
    assert code == 0
    assert set(json.loads(out)["families"]) >= {*NAMED, "train-mix", "train-lublin"}
