"""The timed simulator on processor pools: hand-traced schedules, EASY, and invariants."""

from __future__ import annotations

import numpy as np
import pytest

from placement.pool import ProcessorPool
from placement.queue.priorities import QUEUE_POLICIES
from placement.queue.rlscheduler import simulate
from placement.timed import simulate_batch, simulate_timed
from placement.timed_experiment import summarise_timed
from placement.workloads.batch import BatchJobs


def jobs(rows: list[tuple[float, float, int]], estimates: list[float] | None = None) -> BatchJobs:
    """(submit, run, size) rows; estimates default to the run times."""
    submit, run, size = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    return BatchJobs(
        job_id=np.arange(1, len(rows) + 1),
        submit_s=submit,
        run_s=run,
        estimate_s=run if estimates is None else np.array(estimates, dtype=float),
        size=size.astype(np.int64),
    )


def kale_starts(rows, name: str, backfill: bool, procs: int = 4, estimates=None) -> list:
    data = jobs(rows, estimates)
    run = simulate_batch(data, processors=procs, policy=QUEUE_POLICIES[name], backfill=backfill)
    return run.start_s.tolist()


def reference_starts(rows, name: str, backfill: bool, procs: int = 4) -> list:
    run = simulate(jobs(rows), processors=procs, policy=QUEUE_POLICIES[name], backfill=backfill)
    return run.start_s.tolist()


EASY_CASE = [(0, 10, 2), (1, 5, 4), (2, 5, 2), (3, 20, 1)]


def test_without_backfilling_nothing_overtakes_a_blocked_head() -> None:
    assert kale_starts(EASY_CASE, "fcfs", backfill=False) == [0, 10, 15, 15]


def test_easy_backfills_a_short_job_and_the_head_keeps_its_reservation() -> None:
    # C (ends 7) backfills at 2; B starts at its reservation, 10; D (1 proc, 20 s) would
    # leave only 3 of B's 4 processors at 10, so it waits until B ends at 15.
    assert kale_starts(EASY_CASE, "fcfs", backfill=True) == [0, 10, 2, 15]


def test_classic_easy_lets_a_long_job_use_the_extra_processors() -> None:
    # B needs 3 of 4 at 10: one processor is spare then, so C (1 proc, 50 s) may start at 2
    # and run past the reservation. RLScheduler's rules never use the extra processors.
    rows = [(0, 10, 2), (1, 5, 3), (2, 50, 1)]
    assert kale_starts(rows, "fcfs", backfill=True) == [0, 10, 2]
    assert reference_starts(rows, "fcfs", backfill=True) == [0, 10, 10]


def test_a_job_ending_exactly_at_the_reservation_backfills_in_classic_easy() -> None:
    rows = [(0, 10, 2), (1, 5, 4), (2, 8, 2)]
    assert kale_starts(rows, "fcfs", backfill=True) == [0, 10, 2]
    assert reference_starts(rows, "fcfs", backfill=True) == [0, 10, 15]


def test_a_backfill_that_would_delay_the_head_is_undone() -> None:
    rows = [(0, 10, 2), (1, 5, 4), (2, 50, 2)]
    assert kale_starts(rows, "fcfs", backfill=True) == [0, 10, 15]


def test_the_reservation_follows_estimates() -> None:
    # A is estimated at 100 s but ends at 10. At 2 the estimate says B cannot start before
    # 100, so C (40 s) backfills; B then waits for C until 42 — the price of a bad estimate.
    rows = [(0, 10, 2), (1, 5, 4), (2, 40, 2)]
    assert kale_starts(rows, "fcfs", backfill=True, estimates=[100, 5, 40]) == [0, 42, 2]


def test_the_reservation_is_recomputed_at_every_event() -> None:
    # A (est 100, really 10) and X (30 s) fill the machine; B (4 procs) is reserved at 100.
    # When A ends at 10 the reservation moves to 30 (X's end), so C (arriving at 12, ending
    # at 52) may no longer backfill. RLScheduler's rules keep the reservation of time 1
    # (100) and let C in at 12, which delays B to 52.
    rows = [(0, 10, 2), (0, 30, 2), (1, 5, 4), (12, 40, 2)]
    estimates = [100, 30, 5, 40]
    assert kale_starts(rows, "fcfs", backfill=True, estimates=estimates) == [0, 0, 30, 35]
    data = jobs(rows, estimates)
    ref = simulate(data, processors=4, policy=QUEUE_POLICIES["fcfs"], backfill=True)
    assert ref.start_s.tolist() == [0, 0, 52, 12]


def test_the_head_is_reconsidered_at_every_event() -> None:
    # SJF on 2 processors: when A ends at 10, C (5 s, arrived at 2) is shorter than B.
    rows = [(0, 10, 2), (1, 100, 2), (2, 5, 2)]
    assert kale_starts(rows, "sjf", backfill=False, procs=2) == [0, 15, 10]
    assert reference_starts(rows, "sjf", backfill=False, procs=2) == [0, 10, 110]


def test_metrics_count_waits_slowdown_and_true_utilisation() -> None:
    data = jobs(EASY_CASE)
    run = simulate_timed(
        data, ProcessorPool(4, data.size), policy=QUEUE_POLICIES["fcfs"], backfill=True
    )
    m = summarise_timed(run)
    assert m["mean_wait_s"] == pytest.approx((0 + 9 + 0 + 12) / 4) == m["mean_response_s"]
    assert m["bsld"] == pytest.approx((1 + 1.4 + 1 + 1.6) / 4)
    assert m["makespan_s"] == 35 and m["util"] == pytest.approx(70 / 140)
    assert m["restarts"] == 0 and m["failed"] == 0 and m["jobs"] == 4
    # The timeline records the queue and the processors in use at every event.
    assert run.timeline["t_s"][:3] == [0, 1, 2] and run.timeline["queue"][:3] == [0, 1, 1]
    assert run.timeline["processors"][:3] == [0.5, 0.5, 1.0]


def test_a_job_larger_than_the_pool_fails_and_the_rest_still_runs() -> None:
    data = jobs([(0, 10, 8), (1, 5, 2)])
    run = simulate_timed(data, ProcessorPool(4, data.size), policy=QUEUE_POLICIES["fcfs"])
    assert run.failed.tolist() == [True, False] and run.first_start_s[1] == 1


class CheckedPool(ProcessorPool):
    """A processor pool that checks its books after every change."""

    def check(self) -> None:
        owned = self.owner >= 0
        assert self.free == int(np.count_nonzero(~owned & ~self.down)) >= 0
        for job, units in self.held.items():
            assert (self.owner[units] == job).all() and len(units) == self.sizes[job]

    def try_start(self, job: int) -> bool:
        ok = super().try_start(job)
        self.check()
        return ok

    def stop(self, job: int) -> None:
        super().stop(job)
        self.check()

    def set_down(self, unit: int, down: bool) -> None:
        super().set_down(unit, down)
        self.check()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", ["fcfs", "sjf", "wfp3", "unicep", "f1"])
def test_no_allocation_ever_exceeds_the_pool_and_every_job_finishes(seed: int, name: str) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    rows = list(
        zip(
            np.sort(rng.uniform(0, 500, n)),
            rng.uniform(1, 80, n),
            rng.integers(1, 9, n),
            strict=True,
        )
    )
    data = jobs(rows, estimates=list(rng.uniform(1, 160, n)))  # estimates wrong both ways
    run = simulate_timed(
        data, CheckedPool(8, data.size), policy=QUEUE_POLICIES[name], backfill=True
    )
    assert not np.isnan(run.end_s).any()
    assert (run.first_start_s >= data.submit_s).all()
    np.testing.assert_allclose(run.end_s - run.first_start_s, data.run_s)
    # Replaying the schedule: the processors in use never exceed the pool.
    times = np.unique(run.first_start_s)
    for t in times:
        live = (run.first_start_s <= t) & (run.end_s > t)
        assert data.size[live].sum() <= 8
