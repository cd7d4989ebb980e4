"""Queue policies and timed runs: RLScheduler's published baselines, Kale's rules, openb.

Run from the repository root::

    nice .venv/bin/python -m benchmarks.placement_timed                      # everything
    nice .venv/bin/python -m benchmarks.placement_timed --skip-openb --json-out t.json

Three tables:

1. **RLScheduler's protocol** (``--protocol rlscheduler``) on an SWF log (default: the
   Lublin-1 file): FCFS/SJF/F1 without and with EASY backfilling, average bounded slowdown
   and utilisation beside the values RLScheduler published (SC'20), and the relative gap
   (the target: within 1 %). WFP3 and UNICEP are shown with the real wait; their
   published columns came from a bug (the wait was −(submit+1)) and are not targets.
2. **Kale's rules** (``--protocol kale``) on the same ten sequences: the head job re-decided
   at every event, classic EASY recomputed at every event, every job run to completion and
   the true utilisation (busy processor-seconds over makespan), beside RLScheduler's
   utilisation of the same schedule.
3. **openb timed** (the whole default trace, real arrival times): BestFit and FGD under
   FCFS with EASY, without and with the default GPU faults; then under pressure ("a tenth
   of the nodes, arrivals 100× faster": at face value the trace loads its cluster under 1 %
   and nothing ever waits), FCFS without and with EASY. Wall seconds per run (target for
   the whole trace at face value: ≤ 60 s).

Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.paths import add_data_flag, placement_dir
from kale.terminal.output import table
from placement.timed_experiment import TimedConfig, run_timed

PUBLISHED = {  # RLScheduler (SC'20), Lublin-1: (bsld, util) without / with EASY backfilling
    "fcfs": ((7273.77, 0.657), (235.82, 0.868)),
    "sjf": ((277.35, 0.762), (73.31, 0.778)),
    "f1": ((258.37, 0.816), (75.07, 0.840)),
}
QUEUES = "fcfs,sjf,f1,wfp3,unicep"


def _gap(measured: float, published: float | None) -> str:
    if published is None:
        return "-"
    return f"{100 * (measured - published) / published:+.2f}%"


def protocol_table(swf: str, protocol: str) -> tuple[str, dict[str, Any]]:
    rows, out = [], {}
    for backfill in (False, True):
        report = run_timed(TimedConfig(swf=swf, queue=QUEUES, backfill=backfill, protocol=protocol))
        for name, m in report.policies.items():
            pub = PUBLISHED.get(name, (None, None))[int(backfill)] or (None, None)
            key = f"{name}{'+easy' if backfill else ''}"
            m = {k: v for k, v in m.items() if k != "per_sequence"}
            out[key] = m
            if protocol == "rlscheduler":
                rows.append([key, m["bsld"], pub[0] or "-", _gap(m["bsld"], pub[0]),
                             m["util"], pub[1] or "-", _gap(m["util"], pub[1])])  # fmt: skip
            else:
                rows.append([key, m["bsld"], m["mean_wait_s"], m["util"],
                             m["util_rlscheduler"], m["makespan_s"]])  # fmt: skip
    if protocol == "rlscheduler":
        headers = ["policy", "bsld", "published", "gap", "util", "published", "gap"]
    else:
        headers = ["policy", "bsld", "mean_wait_s", "util_true", "util_rlsched", "makespan_s"]
    return table(rows, headers), out


def openb_table(nodes: str, pods: str, seed: int) -> tuple[str, dict[str, Any]]:
    rows, out = [], {}
    setups = [  # (label, arrival speed-up, node share, EASY)
        ("face value", 1.0, 1.0, True),
        ("pressure", 100.0, 0.1, False),
        ("pressure", 100.0, 0.1, True),
    ]
    for label, speedup, share, backfill in setups:
        for faults in (None, "default"):
            started = time.perf_counter()
            report = run_timed(
                TimedConfig(
                    nodes=nodes, pods=pods, queue="fcfs", backfill=backfill,
                    placement="bestfit,fgd", faults=faults, seed=seed,
                    arrival_speedup=speedup, node_share=share,
                )
            )  # fmt: skip
            seconds = (time.perf_counter() - started) / 2
            for name, m in report.policies.items():
                name = name.replace("fcfs", "fcfs+easy" if backfill else "fcfs")
                key = f"{label} | {name} | faults={faults or 'none'}"
                out[key] = {**m, "seconds_per_run": seconds}
                rows.append([label, name, faults or "none", m["mean_wait_s"], m["bsld"],
                             m["mean_jct_s"], m["util_gpu"], m["frag_ratio"], m["restarts"],
                             m["gpu_hours_lost"], m["failed"], seconds])  # fmt: skip
    headers = ["setup", "policy", "faults", "mean_wait_s", "bsld", "mean_jct_s", "util_gpu",
               "frag", "restarts", "gpu_h_lost", "failed", "s/run"]  # fmt: skip
    return table(rows, headers), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--swf", help="SWF log (default: the shared data's Lublin-1 file)")
    parser.add_argument("--nodes", help="openb node list (default: the shared data's)")
    parser.add_argument("--pods", help="openb pod list (default: the shared data's)")
    add_data_flag(parser)
    parser.add_argument("--seed", type=int, default=0, help="Fault and tie-break seed.")
    parser.add_argument("--skip-openb", action="store_true")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()
    data = placement_dir(args.data)
    args.swf = args.swf or str(data / "lublin_256.swf")
    args.nodes = args.nodes or str(data / "openb_node_list_gpu_node.csv")
    args.pods = args.pods or str(data / "openb_pod_list_default.csv")

    result: dict[str, Any] = {}
    for protocol in ("rlscheduler", "kale"):
        text, result[protocol] = protocol_table(args.swf, protocol)
        print(f"\n== {protocol} protocol on {args.swf} (10 sequences of 1,024 jobs) ==")
        print(text)
    if not args.skip_openb:
        text, result["openb"] = openb_table(args.nodes, args.pods, args.seed)
        print("\n== openb default trace, timed (pressure: 10% of nodes, arrivals 100x faster) ==")
        print(text)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
