"""openb loaders: good rows load with the trace's conventions; every bad row is one
``FILE:LINE: reason`` error. Also the synthetic generator's determinism."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.paths import placement_dir
from placement.errors import PlacementInputError
from placement.workloads.generate import WorkloadShape, generate_nodes, generate_pods
from placement.workloads.openb import load_nodes, load_pods

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
REAL = placement_dir()
"""The real openb lists, where the benchmarks find them (``$KALE_DATA_DIR``, else
``<repo>/../shared/data``); a clean clone has none."""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_nodes_load_in_file_order(tmp_path):
    path = write(tmp_path, "n.csv", NODE_HEADER + "n1,64000,262144,2,P100\nn2,32000,65536,0,nan\n")
    n1, n2 = load_nodes(path)
    assert (n1.name, n1.cpu_milli, n1.memory_mib, n1.gpus, n1.model) == (
        "n1",
        64000,
        262144,
        2,
        "P100",
    )
    assert (n2.gpus, n2.model) == (0, "")


def test_pods_follow_the_trace_conventions(tmp_path):
    rows = [
        "p0,12000,16384,1,1000,,LS,Running,0,100,0",  # one whole GPU, any model
        "p1,6000,12288,1,460,V100M16|V100M32,BE,Running,5,50,5",  # sharing, two models
        "p2,88000,327680,8,1000,nan,Burstable,Succeeded,7,70,7",  # eight whole GPUs
        "p3,4000,8192,0,0,T4,LS,Pending,9,10,",  # CPU-only ignores gpu_spec; never ran
    ]
    p0, p1, p2, p3 = load_pods(write(tmp_path, "p.csv", POD_HEADER + "\n".join(rows) + "\n"))
    assert (p0.num_gpu, p0.gpu_milli, p0.gpu_models, p0.is_sharing) == (1, 1000, frozenset(), 0)
    assert p1.is_sharing and p1.gpu_models == frozenset({"V100M16", "V100M32"})
    assert p2.total_gpu_milli == 8000 and p2.affinity == 8
    assert (p3.is_gpu, p3.gpu_models, p3.scheduled_time, p3.deletion_time) == (
        False,
        frozenset(),
        None,
        10.0,
    )


NODE_ERRORS = [
    # (rows after the header, expected line, words in the message)
    ("n1,64000,262144,two,P100\n", 2, "gpu: not a number"),  # non-numeric GPU count
    ("n1,-1,262144,2,P100\n", 2, "cpu_milli: negative"),  # negative capacity
    ("n1,64000,262144,2,P100\nn1,1,1,0,\n", 3, "duplicate node 'n1'"),  # repeated name
    ("n1,64000,262144,2,\n", 2, "needs a GPU model"),  # GPUs of no model
    ("n1,64000,262144\n", 2, "3 fields, the header has 5"),  # short row
    (",64000,262144,2,P100\n", 2, "empty node name"),  # no name
    ("n1,64000.5,262144,2,P100\n", 2, "not a whole number"),  # fractional milli
    ("n1,,262144,2,P100\n", 2, "missing value"),  # empty field
]


@pytest.mark.parametrize(("rows", "line", "words"), NODE_ERRORS)
def test_bad_node_rows_name_file_and_line(tmp_path, rows, line, words):
    path = write(tmp_path, "nodes.csv", NODE_HEADER + rows)
    with pytest.raises(PlacementInputError) as err:
        load_nodes(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert words in str(err.value)


POD_ERRORS = [
    ("p,1000,1,1,0,,LS,Running,0,1,0\n", 2, "gpu_milli: must be 1..1000"),  # GPU pod, 0 milli
    ("p,1000,1,1,1200,,LS,Running,0,1,0\n", 2, "must be 1..1000"),  # more than a GPU
    ("p,1000,1,2,500,,LS,Running,0,1,0\n", 2, "takes whole GPUs"),  # shares two GPUs
    ("p,1000,1,-1,0,,LS,Running,0,1,0\n", 2, "num_gpu: negative"),  # negative count
    ("p,x,1,0,0,,LS,Running,0,1,0\n", 2, "cpu_milli: not a number"),  # garbage
    ("p,1,1,0,0,,LS,Running,0,1,0\np,1,1,0,0,,LS,Running,0,1,0\n", 3, "duplicate pod"),
    ("p,1,1,0,0,,LS,Running,soon,1,0\n", 2, "creation_time"),  # a time that is not one
    ("p,1,1,0,0,,LS,Running,10,5,0\n", 2, "before creation_time"),  # ends before it starts
    ("p,1,1,0,0\n", 2, "5 fields, the header has 11"),  # short row
]


@pytest.mark.parametrize(("rows", "line", "words"), POD_ERRORS)
def test_bad_pod_rows_name_file_and_line(tmp_path, rows, line, words):
    path = write(tmp_path, "pods.csv", POD_HEADER + rows)
    with pytest.raises(PlacementInputError) as err:
        load_pods(path)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty file"),  # nothing at all
        ("name,cpu_milli\np,1\n", ":1: missing column(s) memory_mib, num_gpu, gpu_milli"),
        (POD_HEADER, "no pods"),  # a header and no rows
    ],
)
def test_bad_pod_files(tmp_path, text, words):
    path = write(tmp_path, "pods.csv", text)
    with pytest.raises(PlacementInputError, match=None) as err:
        load_pods(path)
    assert words in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(PlacementInputError, match="no such file"):
        load_nodes(tmp_path / "absent.csv")


@pytest.mark.skipif(
    not (REAL / "openb_pod_list_default.csv").exists(),
    reason=f"no openb trace in {REAL} (set KALE_DATA_DIR to the shared data folder)",
)
def test_real_trace_loads():
    nodes = load_nodes(REAL / "openb_node_list_gpu_node.csv")
    pods = load_pods(REAL / "openb_pod_list_default.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    assert len(pods) == 8152 and sum(p.num_gpu == 0 for p in pods) == 1088


def test_generator_is_seeded_and_shaped():
    assert generate_nodes(20, seed=3) == generate_nodes(20, seed=3)
    assert generate_nodes(20, seed=3) != generate_nodes(20, seed=4)
    pods = generate_pods(2000, seed=1, shape=WorkloadShape(constrained=0.5))
    assert pods == generate_pods(2000, seed=1, shape=WorkloadShape(constrained=0.5))
    share = sum(p.is_sharing for p in pods) / len(pods)
    assert 0.35 < share < 0.45
    assert any(p.num_gpu in (2, 4, 8) for p in pods)
    assert any(p.gpu_models for p in pods) and not any(p.gpu_models for p in pods if not p.is_gpu)
    assert all(p.deletion_time > p.creation_time for p in pods)
