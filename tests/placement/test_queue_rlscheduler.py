"""RLScheduler's rules on tiny hand-traced sequences (a 4- or 2-processor machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placement.errors import PlacementInputError
from placement.protocol import ProtocolSettings, run_protocol, sequences
from placement.queue.metrics import bounded_slowdown, summarise, true_utilisation
from placement.queue.priorities import QUEUE_POLICIES
from placement.queue.rlscheduler import simulate
from placement.timed import simulate_batch
from placement.workloads.batch import BatchJobs, batch_jobs_from_swf, nodes_needed
from placement.workloads.swf import load_swf


def jobs(rows: list[tuple[float, float, int]], estimates: list[float] | None = None) -> BatchJobs:
    """(submit, run, size) rows; estimates default to the run times (as in Lublin logs)."""
    submit, run, size = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    return BatchJobs(
        job_id=np.arange(1, len(rows) + 1),
        submit_s=submit,
        run_s=run,
        estimate_s=run if estimates is None else np.array(estimates, dtype=float),
        size=size.astype(np.int64),
    )


# A (0 s, 10 s, 2 procs) runs at once; B (4 procs) cannot start before A ends at 10; C (2 procs,
# 5 s) fits beside A and would end at 7, before B's reservation; D (1 proc, 20 s) would end
# long after 10 and there is never a spare processor for it before B ends.
EASY_CASE = [(0, 10, 2), (1, 5, 4), (2, 5, 2), (3, 20, 1)]


def starts(rows: list[tuple[float, float, int]], name: str, backfill: bool, procs: int = 4) -> list:
    run = simulate(jobs(rows), processors=procs, policy=QUEUE_POLICIES[name], backfill=backfill)
    return run.start_s.tolist()


def test_without_backfilling_the_queue_waits_behind_the_head() -> None:
    # B starts when A ends (10); C and D start together when B ends (15).
    assert starts(EASY_CASE, "fcfs", backfill=False) == [0, 10, 15, 15]


def test_easy_backfills_a_job_that_ends_before_the_reservation_and_keeps_it() -> None:
    # C backfills at 2 (ends 7 < 10); B still starts at its reservation, 10; D waits for B.
    assert starts(EASY_CASE, "fcfs", backfill=True) == [0, 10, 2, 15]


def test_a_job_ending_exactly_at_the_reservation_does_not_backfill() -> None:
    # C now runs 8 s: it would end at 10, not strictly before B's reservation.
    rows = [(0, 10, 2), (1, 5, 4), (2, 8, 2)]
    assert starts(rows, "fcfs", backfill=True) == [0, 10, 15]


def test_a_backfill_candidate_that_would_delay_the_head_waits() -> None:
    # C runs 50 s: starting it at 2 would hold 2 processors past 10 and delay B.
    rows = [(0, 10, 2), (1, 5, 4), (2, 50, 2)]
    assert starts(rows, "fcfs", backfill=True) == [0, 10, 15]


def test_the_reservation_uses_estimates_not_true_run_times() -> None:
    # A is estimated at 100 s but ends at 10. B's reservation is at 100 by the estimate, so C
    # (40 s) backfills at 2; B still starts at 10 when A really ends... but C holds 2
    # processors until 42, so B (4) starts at 42.
    data = jobs([(0, 10, 2), (1, 5, 4), (2, 40, 2)], estimates=[100, 5, 40])
    run = simulate(data, processors=4, policy=QUEUE_POLICIES["fcfs"], backfill=True)
    assert run.start_s.tolist() == [0, 42, 2]


def test_the_head_is_not_reconsidered_when_a_better_job_arrives() -> None:
    # SJF on 2 processors: B (100 s) becomes head at 1 while A runs; C (5 s) arrives at 2.
    # RLScheduler keeps B as head, so B starts at 10 and C at 110.
    rows = [(0, 10, 2), (1, 100, 2), (2, 5, 2)]
    assert starts(rows, "sjf", backfill=False, procs=2) == [0, 10, 110]


def test_several_jobs_start_at_the_same_instant_in_priority_order() -> None:
    # SJF: when A ends at 10, C (5 s) then B (20 s) both fit and start together.
    rows = [(0, 10, 4), (1, 20, 2), (2, 5, 2)]
    assert starts(rows, "sjf", backfill=False) == [0, 10, 10]


def test_a_job_larger_than_the_machine_fails_instead_of_blocking_forever() -> None:
    run = simulate(
        jobs([(0, 10, 8), (1, 5, 2)]), processors=4, policy=QUEUE_POLICIES["fcfs"], backfill=False
    )
    assert run.failed == 1 and np.isnan(run.start_s[0]) and run.start_s[1] == 1


def test_metrics_of_the_easy_case_by_hand() -> None:
    run = simulate(jobs(EASY_CASE), processors=4, policy=QUEUE_POLICIES["fcfs"], backfill=True)
    m = summarise(run, 4)
    # waits 0, 9, 0, 12; runs 10, 5, 5, 20 → slowdowns max(10/10,1)=1, 14/10, 1, 32/20.
    assert m["bsld"] == pytest.approx((1 + 1.4 + 1 + 1.6) / 4)
    assert m["mean_wait_s"] == pytest.approx(21 / 4)
    assert m["makespan_s"] == 35 and m["mean_jct_s"] == pytest.approx((10 + 14 + 5 + 32) / 4)
    # Work 20+20+10+20 = 70 processor-seconds. RLScheduler divides by (last start 15 − 0)·4
    # (more than the machine could do); the true utilisation by makespan 35·4.
    assert m["util"] == pytest.approx(70 / 60)
    assert true_utilisation(run, 4) == pytest.approx(70 / 140) == m["util_true"]


def test_bounded_slowdown_uses_tau_10_for_short_jobs() -> None:
    got = bounded_slowdown(np.array([0.0, 5.0, 30.0]), np.array([1.0, 5.0, 30.0]))
    np.testing.assert_allclose(got, [1.0, 1.0, 2.0])


SWF_ROW = "{id} {submit} -1 {run} {procs} -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n"


def test_swf_conversion_drops_zero_runs_and_takes_the_larger_processor_count(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.swf"
    path.write_text(
        "; MaxNodes: 4\n"
        + SWF_ROW.format(id=1, submit=0, run=10, procs=2)
        + SWF_ROW.format(id=2, submit=1, run=0, procs=2)  # ran 0 s: dropped
        + "3 2 -1 7 1 -1 -1 3 20 -1 1 -1 -1 -1 0 -1 -1 -1\n",  # 1 allocated, 3 requested, 20 s
        encoding="utf-8",
    )
    data = batch_jobs_from_swf(load_swf(path))
    assert data.job_id.tolist() == [1, 3] and data.dropped == 1
    assert data.size.tolist() == [2, 3]
    assert data.estimate_s.tolist() == [10, 20]  # run time when no request; else the request


def test_protocol_averages_per_sequence_and_refuses_a_short_log() -> None:
    data = jobs([(t, 10, 1) for t in range(12)])
    settings = ProtocolSettings(starts=(0, 6), length=6)
    assert [len(s) for s in sequences(data, settings, path="x")] == [6, 6]
    out = run_protocol(
        data, processors=4, policy=QUEUE_POLICIES["fcfs"], backfill=False, settings=settings
    )
    # Per sequence: 4 of the 6 jobs start at once; the 5th and 6th wait 6 s each (4 slots,
    # 10 s jobs arriving 1 s apart): bsld = (4·1 + 2·1.6)/6 = 1.2 in both sequences.
    assert out["bsld"] == pytest.approx(1.2) and out["jobs"] == 12 and len(out["per_sequence"]) == 2
    with pytest.raises(
        PlacementInputError, match="x: the rlscheduler protocol needs at least 13 jobs"
    ):
        sequences(data, ProtocolSettings(starts=(0, 7), length=6), path="x")


def test_a_log_stating_nodes_and_processors_is_allocated_by_whole_nodes() -> None:
    # MaxProcs 4 in MaxNodes 2: a one-processor job holds a whole 2-processor node, so the
    # third one-processor job waits for a node although only 2 of 4 processors are busy.
    data = jobs([(0, 10, 1), (0, 10, 1), (0, 10, 1), (0, 10, 3)])
    assert nodes_needed(data.size, processors=4, nodes=2).tolist() == [1, 1, 1, 2]
    for engine in (simulate, simulate_batch):
        run = engine(data, processors=4, nodes=2, policy=QUEUE_POLICIES["fcfs"], backfill=False)
        assert run.start_s.tolist() == [0, 0, 10, 20]
    # Utilisation still counts processors: 60 processor-seconds over 30 s × 4.
    assert true_utilisation(run, 4) == pytest.approx(60 / 120)
