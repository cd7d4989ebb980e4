"""GPU/processor faults: what a failure costs a job, the default model, and the rate table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from placement.errors import PlacementInputError
from placement.faults import (
    FLAKY_FACTOR,
    FaultModel,
    FaultSettings,
    default_fault_model,
    load_fault_table,
)
from placement.pool import ProcessorPool
from placement.queue.priorities import QUEUE_POLICIES
from placement.timed import simulate_timed
from placement.timed_experiment import summarise_timed
from placement.workloads.batch import BatchJobs

SETTINGS = FaultSettings(checkpoint_s=3600, restart_s=600, repair_s=7200)


def jobs(rows: list[tuple[float, float, int]]) -> BatchJobs:
    submit, run, size = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    return BatchJobs(np.arange(1, len(rows) + 1), submit, run, run, size.astype(np.int64))


def run_with(rows, failures, settings: FaultSettings = SETTINGS, procs: int = 4):
    data = jobs(rows)
    model = FaultModel(np.zeros(procs), settings=settings, scripted=tuple(failures))
    pool = ProcessorPool(procs, data.size)
    return simulate_timed(data, pool, policy=QUEUE_POLICIES["fcfs"], faults=model)


def test_a_failure_kills_the_job_which_resumes_from_its_last_checkpoint() -> None:
    # A holds processors 0-1; processor 0 fails at 5000 s: the checkpoint at 3600 s is kept,
    # 1400 s × 2 processors are lost, A re-queues at 5600 on processors 1-2 for 6400 s more.
    run = run_with([(0, 10_000, 2)], [(5000, 0)])
    assert run.restarts.tolist() == [1] and run.failures == 1
    assert run.lost_unit_hours == pytest.approx(1400 * 2 / 3600)
    assert run.end_s[0] == 12_000 and run.first_start_s[0] == 0 and run.wait_s[0] == 0
    m = summarise_timed(run)
    assert m["restarts"] == 1 and m["gpu_hours_lost"] == pytest.approx(1400 * 2 / 3600)
    assert m["bsld"] == pytest.approx(12_000 / 10_000) and m["mean_jct_s"] == 12_000


def test_a_failed_unit_is_unavailable_until_repaired() -> None:
    # A needs all 4 processors: after the failure at 5000 it waits for the repair at 12200.
    run = run_with([(0, 10_000, 4)], [(5000, 0)])
    assert run.end_s[0] == 12_200 + 6_400
    assert run.wait_s[0] == 12_200 - 5_600  # queued from the re-queue to the restart
    assert summarise_timed(run)["mean_response_s"] == 0  # it first started at once


def test_a_failure_on_an_idle_unit_only_takes_it_out_of_service() -> None:
    run = run_with([(0, 100, 4), (0, 50, 3)], [(0, 3)])
    # Processor 3 fails at 0 and is down until 7200: the 4-processor FCFS head cannot start
    # before then, and without backfilling the 3-processor job behind it waits too.
    assert run.restarts.tolist() == [0, 0]
    assert run.first_start_s.tolist() == [7200, 7300]


def test_without_checkpoints_a_failure_loses_the_whole_run_so_far() -> None:
    never = FaultSettings(checkpoint_s=math.inf, restart_s=600, repair_s=7200)
    run = run_with([(0, 10_000, 2)], [(5000, 0)], settings=never)
    assert run.lost_unit_hours == pytest.approx(5000 * 2 / 3600)
    assert run.end_s[0] == 5600 + 10_000


def test_random_failures_are_seeded_and_every_job_still_finishes() -> None:
    rng = np.random.default_rng(0)
    rows = [
        (float(t), 3600.0 * 5, int(s))
        for t, s in zip(np.arange(40) * 600, rng.integers(1, 5, 40), strict=True)
    ]
    data = jobs(rows)
    model = FaultModel(np.full(8, 0.05), settings=SETTINGS)  # one failure per 20 h per unit

    def once(seed: int):
        pool = ProcessorPool(8, data.size)
        return simulate_timed(
            data, pool, policy=QUEUE_POLICIES["sjf"], backfill=True, faults=model, seed=seed
        )

    a, b, c = once(1), once(1), once(2)
    assert a.restarts.sum() > 0 and not np.isnan(a.end_s).any()
    assert a.end_s.tolist() == b.end_s.tolist() and a.failures == b.failures
    assert a.end_s.tolist() != c.end_s.tolist()


def test_the_default_model_has_a_seeded_minority_of_flaky_units() -> None:
    model = default_fault_model(1000, seed=7)
    flaky = model.flaky_units()
    assert len(flaky) == 50
    assert model.rate_per_hour.max() == pytest.approx(model.rate_per_hour.min() * FLAKY_FACTOR)
    share = model.rate_per_hour[flaky].sum() / model.rate_per_hour.sum()
    assert 0.6 < share < 0.8  # the 5 % flaky units cause most failures
    assert flaky.tolist() == default_fault_model(1000, seed=7).flaky_units().tolist()
    assert flaky.tolist() != default_fault_model(1000, seed=8).flaky_units().tolist()


UNITS = [("n0", 0), ("n0", 1), ("n1", 0), ("n1", 1)]


def table(tmp_path: Path, body: str, header: str = "node,gpu,rate_per_hour\n") -> Path:
    path = tmp_path / "rates.csv"
    path.write_text(header + body, encoding="utf-8")
    return path


def test_the_rate_table_applies_rows_in_order_with_wildcards(tmp_path: Path) -> None:
    path = table(tmp_path, "*,*,0.001\nn1,*,0.01\nn1,1,0.5\n\n")
    model = load_fault_table(path, UNITS)
    assert model.rate_per_hour.tolist() == [0.001, 0.001, 0.01, 0.5]
    assert model.source == str(path)
    assert load_fault_table(table(tmp_path, "n0,1,0.2\n"), UNITS).rate_per_hour.tolist() == [
        0,
        0.2,
        0,
        0,
    ]


BAD_TABLES = [
    # the header is not the documented one
    ("node,rate\n", "", "rates.csv:1: header must be 'node,gpu,rate_per_hour'"),
    # a row with two fields
    (None, "n0,0\n", "rates.csv:2: expected 3 fields, found 2"),
    # a node the cluster does not have
    (None, "n9,0,0.1\n", "rates.csv:2: node: 'n9' is not a node of the cluster"),
    # a GPU index that is not a number
    (None, "n0,first,0.1\n", "rates.csv:2: gpu: 'first' must be an index or '*'"),
    # a GPU the node does not have
    (None, "n0,7,0.1\n", "rates.csv:2: gpu: node 'n0' has no GPU 7"),
    # a negative rate
    (None, "n0,0,-1\n", "rates.csv:2: rate_per_hour: -1 must be a finite number"),
    # a rate that is not a number
    (None, "*,*,0.1\nn0,0,often\n", "rates.csv:3: rate_per_hour: 'often' is not a number"),
    # NaN is not a rate
    (None, "n0,0,nan\n", "rates.csv:2: rate_per_hour: nan must be a finite number"),
]


@pytest.mark.parametrize(("header", "body", "message"), BAD_TABLES)
def test_a_bad_rate_table_row_names_file_line_and_reason(
    tmp_path: Path, header, body, message
) -> None:
    path = table(tmp_path, body) if header is None else table(tmp_path, body, header=header)
    with pytest.raises(PlacementInputError) as err:
        load_fault_table(path, UNITS)
    assert message in str(err.value)


def test_a_missing_rate_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PlacementInputError, match=r"nope\.csv: no such file"):
        load_fault_table(tmp_path / "nope.csv", UNITS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"checkpoint_s": 0}, "checkpoint interval must be > 0"),  # would divide by zero
        ({"restart_s": -1}, "restart_s: must be a finite number"),  # time runs forward
        ({"repair_s": math.inf}, "repair_s: must be a finite number"),  # never repaired
    ],
)
def test_fault_settings_refuse_meaningless_values(kwargs: dict, message: str) -> None:
    with pytest.raises(PlacementInputError, match=message):
        FaultSettings(**kwargs)
