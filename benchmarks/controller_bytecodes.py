"""The interpreter work of a steady controller tick, per job: a count, not a timing.

Run from the repository root::

    .venv/bin/python -m benchmarks.controller_bytecodes                 # 200 jobs, 8 ticks
    .venv/bin/python -m benchmarks.controller_bytecodes --top 30 --json

Why a count: the tick's CPU time on a shared 2-core machine moves by ±5–10 % from one run
to the next, more than most changes to the tick's code are worth, so an A/B timing of a
small change says little. The number of Python bytecodes a steady tick executes per job
(and the calls into C it makes) is the same on every run of the same code and the same
Python: it shows a change to the per-job work exactly, before a timing confirms what it is
worth. It does not see what C code costs (numpy, JSON, SQLite) nor what memory costs (a
job's objects spread over a large heap cost more to reach at 10,000 jobs than at 100), so
the tick benchmark (:mod:`benchmarks.controller`) stays the judge.

The same fleet as :mod:`benchmarks.controller` (a job's synthetic topic, cached forecasts,
dry-run targets, SQLite state); after the warm-up tick and a few ticks for the planners to
settle into following their plans, ``--ticks`` ticks are traced one by one and the ones at
or below the median are counted: the others are those on which every planner searches
again together (a renewed forecast), so what is counted is the steady tick the benchmark's
median reports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from benchmarks.controller import INTERVAL, Fleet, StaticJobs, settle_heap
from benchmarks.paths import ROOT

SETTLE_TICKS = 5
"""Ticks after the warm-up before counting: the warm-up resizes most jobs, and a job is
steady only once that resize is over and its planner follows a plan on a renewed
forecast."""


class _Counter:
    """Counts bytecodes per function (``sys.settrace`` with opcode events) and C calls
    (``sys.setprofile``)."""

    def __init__(self) -> None:
        self.by_function: Counter[str] = Counter()
        self.c_calls = 0
        self._names: dict[CodeType, str] = {}

    def _where(self, frame: FrameType) -> str:
        code = frame.f_code
        where = self._names.get(code)
        if where is None:
            path = Path(code.co_filename)
            with contextlib.suppress(ValueError):
                path = path.resolve().relative_to(ROOT)
            where = self._names[code] = f"{path}:{code.co_name}"
        return where

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        where = self._where(frame)
        by_function = self.by_function

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                by_function[where] += 1
            return local

        return local

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            self.c_calls += 1


def count(n_jobs: int, ticks: int) -> dict[str, Any]:
    """Bytecodes and C calls per job in the steady ones of ``ticks`` traced ticks of
    ``n_jobs`` jobs: those at or below the median tick (the ones where every planner
    searches again, on a renewed forecast, are the rest)."""
    logging.disable(logging.WARNING)
    fleet = Fleet(n_jobs, 2, False)
    counters: list[_Counter] = []
    with tempfile.TemporaryDirectory(prefix="kale-bytecodes-") as tmp:
        controller = fleet.controller(StaticJobs(fleet.loaded), Path(tmp) / "s.sqlite", "moves")
        controller.tick()
        settle_heap()
        for step in range(SETTLE_TICKS + ticks):
            fleet.clock_t[0] += INTERVAL
            if step < SETTLE_TICKS:
                controller.tick()
                continue
            counter = _Counter()
            sys.settrace(counter.trace)
            sys.setprofile(counter.profile)
            try:
                controller.tick()
            finally:
                sys.settrace(None)
                sys.setprofile(None)
            counters.append(counter)
        controller.close()
    totals = [sum(c.by_function.values()) for c in counters]
    median = statistics.median(totals)
    steady = [c for c, t in zip(counters, totals, strict=True) if t <= median]
    by_function: Counter[str] = Counter()
    for c in steady:
        by_function.update(c.by_function)
    per_job = n_jobs * len(steady)
    return {
        "jobs": n_jobs,
        "ticks": ticks,
        "steady_ticks": len(steady),
        "python": sys.version.split()[0],
        "bytecodes_per_job": round(sum(by_function.values()) / per_job, 1),
        "c_calls_per_job": round(sum(c.c_calls for c in steady) / per_job, 1),
        "bytecodes_per_job_all_ticks": round(sum(totals) / (n_jobs * len(totals)), 1),
        "by_function": {k: round(v / per_job, 1) for k, v in by_function.most_common()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--ticks", type=int, default=10, help="ticks traced")
    ap.add_argument("--top", type=int, default=20, help="functions listed (0: none)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    if args.jobs < 1 or args.ticks < 1:
        ap.error("--jobs and --ticks must be at least 1")
    res = count(args.jobs, args.ticks)
    if args.json:
        res["by_function"] = dict(list(res["by_function"].items())[: max(args.top, 0)])
        print(json.dumps(res, indent=2))
        return 0
    print(
        f"steady tick, {res['jobs']} jobs, {res['steady_ticks']} of {res['ticks']} ticks "
        f"traced, Python "
        f"{res['python']}: {res['bytecodes_per_job']:.0f} bytecodes and "
        f"{res['c_calls_per_job']:.0f} C calls per job"
    )
    for name, n in list(res["by_function"].items())[: max(args.top, 0)]:
        print(f"{n:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
