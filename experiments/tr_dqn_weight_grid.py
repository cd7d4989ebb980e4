"""tr_dqn with a finer grid of rank weightings among its level-1 proposals.

Run from the repository root::

    nice .venv/bin/python -m experiments.tr_dqn_weight_grid --out grid.pt

The shipped tr_dqn chooses, per queue state, among the heads of the document's rank
``w1·length + w2·wait + w3·deadline`` under five weightings and of three heuristics. This
asks whether a finer choice of weights per state helps: three more weightings (aging at a
tenth and at three tenths of SJF's weight on the wait, and SJF with a tenth of the deadline
slack) join the eight, everything else as the shipped plan (``TR`` in
``benchmarks/placement_agents.py``: 60 episodes, seed 0, warm start from SJF + EASY,
selection on generated validation sequences). The trained file is then judged by the
benchmark's queue section (Lublin-1, the Lublin model, the Lublin families). The extra
weightings exist only in this script's process, so the file it writes loads nowhere else.
Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.paths import add_data_flag, placement_dir
from benchmarks.placement_agents import TR, judge_queue
from placement.agents.training import train_agent
from placement.env.queue_features import PROPOSALS, RankWeights
from placement.workloads.batch import batch_jobs_from_swf
from placement.workloads.swf import load_swf

EXTRA = {
    "aging-0.1": RankWeights(1.0, -0.1, 0.0),
    "aging-0.3": RankWeights(1.0, -0.3, 0.0),
    "sjf-deadline-0.1": RankWeights(1.0, 0.0, 0.1),
}
SHIPPED = ("sjf", "fcfs", "deadline", "aging", "f1", "wfp3", "unicep", "sjf-deadline")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the trained file")
    add_data_flag(parser)
    args = parser.parse_args()
    PROPOSALS.update(EXTRA)
    names = [*SHIPPED, *EXTRA]
    trace = load_swf(placement_dir(args.data) / "lublin_256.swf")
    jobs, processors = batch_jobs_from_swf(trace), int(trace.processors or 256)
    started, cpu = time.perf_counter(), time.process_time()
    agent = train_agent(
        "tr_dqn",
        episodes=TR["episodes"],
        seed=TR["seed"],
        overrides={"env.proposals": names, "env.window": len(names)},
        jobs=jobs,
        processors=processors,
    )
    agent.save(args.out)
    training = {
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
        "load_average": os.getloadavg()[0],
        "kept_episode": agent.kept_episode,
        "validation": [
            (r["episode"], r["validation_bsld"])
            for r in agent.curve.records
            if r["validation_bsld"] == r["validation_bsld"]
        ],
    }
    print(json.dumps(training), flush=True)
    result = judge_queue(jobs, processors, f"agent:{args.out}")
    result["training"] = training
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=float))
    key = f"agent:{args.out}"
    print(
        f"Lublin-1 +EASY {result[key + '+easy']['bsld']:.2f} (SJF {result['sjf+easy']['bsld']:.2f})"
    )
    model = result["lublin_model"]
    mine, sjf = model[key + "+easy"]["bsld"], model["sjf+easy"]["bsld"]
    print(f"Lublin model +EASY {mine:.2f} (SJF {sjf:.2f})")
    for family, rows in result["families"].items():
        print(f"{family}: {rows[key + '+easy']['bsld']:.2f} (SJF {rows['sjf+easy']['bsld']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
