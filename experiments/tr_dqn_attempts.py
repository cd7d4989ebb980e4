"""tr_dqn's second round (decision 0126): warm start, n-step/double targets, more data.

Run from the repository root::

    nice .venv/bin/python -m experiments.tr_dqn_attempts --baselines
    nice .venv/bin/python -m experiments.tr_dqn_attempts --attempt warm_dqfd --out a1.pt

Each attempt trains tr_dqn (seed 0 unless ``--seed``) on the Lublin log's windows outside
RLScheduler's ten test sequences plus Lublin-model sequences (``placement.workloads.lublin``,
generator seeds from 100,000), keeps the weights that score best on four held-out model
sequences (seeds 50,000–50,003), and is then judged — once — on

* **Lublin-1**: RLScheduler's ten test sequences, its rules, EASY (``run_protocol``);
* **Lublin model**: ten sequences of 1,024 jobs from generator seeds 1–10 at the load of the
  log's training part, never trained or validated on.

Beside it: the same networks right after the warm start (what the learning adds over
imitation), and with ``--baselines`` the heuristics and the imitated rule itself (SJF heads,
shortest eligible job backfilled first). Prints CPU and wall seconds of training (the
machine is shared: wall time is an upper bound). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.paths import add_data_flag, placement_dir
from placement.agents.common import EpsilonSchedule
from placement.agents.tr_dqn_warm import ImitationSettings
from placement.agents.training import (
    JUDGE_SEEDS,
    lublin_sequences,
    train_agent,
    training_arrival_scale,
)
from placement.protocol import RLSCHEDULER_STARTS, ProtocolSettings, run_protocol
from placement.queue.metrics import summarise
from placement.queue.priorities import queue_policy
from placement.queue.rlscheduler import simulate
from placement.workloads.batch import batch_jobs_from_swf
from placement.workloads.swf import load_swf

COMMON = {
    "env.window": 8,
    "synthetic_sequences": 256,
    "validate_every": 10,
    "validation_sequences": 4,
}
ATTEMPTS: dict[str, tuple[int, dict[str, object]]] = {
    # 1: DQfD — demonstrations stay in every batch with the margin term.
    "warm_dqfd": (
        100,
        {
            **COMMON,
            "explore": EpsilonSchedule(0.1, 0.02, 0.99995),
            "gamma": 0.9,
            "n_step": 5,
            "double": True,
            "imitation": ImitationSettings(episodes=40, steps=4000, margin=0.02, demo_batch=16),
        },
    ),
    # 2: no demonstrations — do better targets and more data alone make DQN learn?
    "scratch_nstep": (
        100,
        {
            **COMMON,
            "explore": EpsilonSchedule(1.0, 0.05, 0.99995),
            "gamma": 0.9,
            "n_step": 5,
            "double": True,
        },
    ),
}


class ShortestFirst:
    """The imitated rule as a queue policy: SJF heads, shortest eligible backfill first."""

    name = "shortest_first"

    def keys(self, view):
        return (view.estimate_s, view.submit_s)

    def pick_backfill(self, view, candidates, shadow_s):
        return int(np.argmin(view.estimate_s[candidates]))


def judge(policy, jobs, model_sequences, processors: int) -> dict[str, float]:
    """Mean bounded slowdown with EASY on Lublin-1's judged sequences and the model's."""
    lublin1 = run_protocol(
        jobs, processors=processors, policy=policy, backfill=True, settings=ProtocolSettings()
    )
    model = [
        summarise(simulate(s, processors=processors, policy=policy, backfill=True), processors)
        for s in model_sequences
    ]
    return {
        "lublin1": round(float(lublin1["bsld"]), 2),
        "lublin_model": round(float(np.mean([m["bsld"] for m in model])), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempt", choices=sorted(ATTEMPTS))
    parser.add_argument("--baselines", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    parser.add_argument("--out", type=Path, help="save the trained agent here")
    add_data_flag(parser)
    args = parser.parse_args()
    trace = load_swf(placement_dir(args.data) / "lublin_256.swf")
    jobs, processors = batch_jobs_from_swf(trace), int(trace.processors or 256)
    scale = training_arrival_scale(jobs, processors, RLSCHEDULER_STARTS)
    model_sequences = lublin_sequences(JUDGE_SEEDS, processors, scale)
    print(f"Lublin model arrival scale (from the log's training part): {scale:.4f}")
    if args.baselines:
        for policy in [queue_policy(n) for n in ("fcfs", "sjf", "f1")] + [ShortestFirst()]:
            print(f"{policy.name:<16}", judge(policy, jobs, model_sequences, processors))
    if args.attempt:
        episodes, overrides = ATTEMPTS[args.attempt]
        wall, cpu = time.perf_counter(), time.process_time()
        agent = train_agent(
            "tr_dqn",
            episodes=episodes,
            seed=args.seed,
            overrides=overrides,
            jobs=jobs,
            processors=processors,
            on_episode=lambda r: print(json.dumps(r), file=sys.stderr, flush=True),
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if args.out:
            agent.save(args.out)
        result = {
            "attempt": args.attempt,
            "seed": args.seed,
            "train_wall_s": round(wall),
            "train_cpu_s": round(cpu),
            "kept_episode": agent.kept_episode,
            "warm_start": {k: round(v, 4) for k, v in agent.warm_start.items()},
            "agent": judge(agent.policy(), jobs, model_sequences, processors),
        }
        if agent.warm_weights:
            warm = copy.deepcopy(agent)
            for name, state in agent.warm_weights.items():
                getattr(warm, name).load_state_dict(state)
            result["warm_start_only"] = judge(warm.policy(), jobs, model_sequences, processors)
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
