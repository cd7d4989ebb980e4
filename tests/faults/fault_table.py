"""The controller's faults in one table: each fault, how it is survived.

Run from the repository root::

    .venv/bin/python -m tests.faults.fault_table                  # every scenario (~1-2 min)
    .venv/bin/python -m tests.faults.fault_table --only api_429 --only kill9_mid_tick
    .venv/bin/python -m tests.faults.fault_table --json-out faults.json

It lives with the fault tests, not with the benchmarks: it is their rig (fake clock, fake API
server with injected answers, hooks into the controller) run end to end and summed up
(docs/decisions/0166-benchmarks-and-test-support.md).

Each scenario runs the real controller — against the real embedded broker (tansu, private,
restarted and SIGSTOPped here), the fake Kubernetes API server (real REST paths, through the
official client; 409/429/5xx/slow/lost answers injected), or in a subprocess killed with
SIGKILL — on a fake clock of 60 s per tick, and reports:

* **ticks to recover**: ticks after the fault ends until every job is served normally again
  (measured, resized to its plan, no resize left unfinished);
* **crashes**: exceptions that escaped a tick, and processes that exited on their own;
* **double resizes**: a StatefulSet changed again within the rescale window of its previous
  change (client time), or a second Event for one resize;
* **lost history rows**: rows committed to the SQLite history before a kill, or before a
  broker restart, that are not there afterwards.

Targets: 0 crashes, 0 double resizes, 0 lost rows, recovery ≤ 2 ticks. Not a
test: it measures and prints; ``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autoscaler.controller.metering import KafkaMetricSource
from autoscaler.controller.settings import ControllerSettings
from autoscaler.kafka import clients
from autoscaler.kafka.history import HistoryStore
from autoscaler.kafka.local.broker import EmbeddedBroker
from tests.support.fault_fakes import (
    T0,
    ClusterRig,
    FakeKubeApi,
    HostileRig,
    Objects,
    double_resizes,
    job_doc,
)

ROOT = Path(__file__).resolve().parents[2]
WORKER = "tests.support.crash_worker"
MAX_TICKS = 8


@dataclass
class Row:
    fault: str
    ticks_to_recover: int | None
    """None: not recovered within the scenario's ticks."""
    crashes: int
    double_resizes: int
    lost_history_rows: int
    note: str = ""


# -- helpers ---------------------------------------------------------------------------------
class Crashes:
    """Counts exceptions escaping ticks (the controller must never let one out)."""

    def __init__(self) -> None:
        self.n = 0

    def tick(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # counted, the scenario goes on
            self.n += 1
            logging.getLogger("faults").error("a tick raised: %r", exc)
            return None


def history_rows(path: Path) -> int:
    if not path.exists():
        return 0
    with HistoryStore(path) as h:
        return len(h.rows("t"))


def extra_events(api: FakeKubeApi) -> int:
    """Resize Events beyond the resizes the StatefulSets saw (one Event per resize: a second
    one means a resize was counted, or done, twice). A resize is the writes of one job at
    one client time that changed a replica count."""
    ops: set[tuple[str, float | None]] = set()
    last: dict[str, int] = {}
    for r in api.calls(contains="/scale"):
        if r.method not in ("PUT", "PATCH") or r.status not in (0, 200) or not r.body:
            continue
        sts = r.path.split("/statefulsets/")[1].split("/")[0]
        n = r.body.get("spec", {}).get("replicas")
        if n is None or last.get(sts) == n:
            continue
        last[sts] = n
        ops.add((sts.rsplit("-", 1)[0], r.clock))
    events = [e for e in api.list("v1", "Event", "ml") if e["reason"] in ("ScaledUp", "ScaledDown")]
    return max(0, len(events) - len(ops))


def produce(bootstrap: str, n: int) -> None:
    prod = clients.producer(bootstrap)
    try:
        for i in range(n):
            prod.send("t", b"x%d" % i)
        prod.flush(timeout=30)
    finally:
        clients.close_quietly(prod)


def kafka_rig(tmp: Path, broker: EmbeddedBroker) -> tuple[HostileRig, Callable[[], None]]:
    """Three jobs: ml/a on the real broker (fake clock), ml/b and ml/c synthetic."""
    settings = ControllerSettings(
        identity="bench", observe_threads=4, observe_deadline_s=2.0, history_s=4 * 3600
    )
    rig = HostileRig(tmp / "rig", settings=settings)
    real = rig.controller.meter_factory
    sources: list[KafkaMetricSource] = []

    def meter(entry: Any) -> Any:
        if entry.key != "ml/a":
            return real(entry)
        src = KafkaMetricSource(
            bootstrap=broker.bootstrap,
            topic="t",
            group="g",
            history_path=tmp / "history.sqlite",
            window_s=10,
            timeout_s=3,
            interval_s=60,
            now=rig.clock,
        )
        sources.append(src)
        return src

    rig.controller.meter_factory = meter

    def close() -> None:
        rig.controller.close()

    return rig, close


def measured(reports: dict[str, Any] | None, key: str = "ml/a") -> bool:
    return bool(reports) and key in reports and reports[key].sample is not None  # type: ignore[index]


# -- broker scenarios -----------------------------------------------------------------------
def broker_restart(tmp: Path, *, down_ticks: int) -> Row:
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    port = broker.port
    clients.ensure_topic(broker.bootstrap, "t", 1)
    rig, close = kafka_rig(tmp, broker)
    crashes = Crashes()
    try:
        for _ in range(3):
            produce(broker.bootstrap, 120)
            crashes.tick(rig.tick)
        rows_before = history_rows(tmp / "history.sqlite")
        broker.stop()
        for _ in range(down_ticks):
            crashes.tick(rig.tick)
        broker = EmbeddedBroker(port=port, log_path=tmp / "tansu2.log").start()
        clients.ensure_topic(broker.bootstrap, "t", 1)
        recovered = None
        for tick in range(1, MAX_TICKS + 1):
            produce(broker.bootstrap, 600)  # 10/s at 60 s per tick
            reports = crashes.tick(rig.tick)
            sample = reports["ml/a"].sample if measured(reports) else None
            if sample is not None:
                wrong = abs(sample.arrival_rate - 10.0) > 0.01
                recovered = tick if not wrong else None
                if not wrong:
                    break
        rows_after = history_rows(tmp / "history.sqlite")
        return Row(
            "broker kill + restart (memory: offsets back to 0)"
            if down_ticks
            else "broker restart between ticks (offsets backwards)",
            recovered,
            crashes.n,
            0,
            max(0, rows_before - rows_after),
            "rate right at once after recovery" if recovered else "",
        )
    finally:
        close()
        broker.stop()


def broker_freeze(tmp: Path) -> Row:
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    clients.ensure_topic(broker.bootstrap, "t", 1)
    rig, close = kafka_rig(tmp, broker)
    crashes = Crashes()
    others_missed = 0
    try:
        for _ in range(2):
            produce(broker.bootstrap, 60)
            crashes.tick(rig.tick)
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        longest = 0.0
        for _ in range(2):
            began = time.monotonic()
            reports = crashes.tick(rig.tick)
            longest = max(longest, time.monotonic() - began)
            others_missed += sum(not measured(reports, k) for k in ("ml/b", "ml/c"))
        os.kill(broker.pid, signal.SIGCONT)
        recovered = None
        for tick in range(1, MAX_TICKS + 1):
            rt = rig.controller.runtimes["ml/a"]
            if rt.measuring is not None:
                rt.measuring.exception(timeout=30)  # the frozen call drains (client timeout)
            produce(broker.bootstrap, 60)
            if measured(crashes.tick(rig.tick)):
                recovered = tick
                break
        return Row(
            "broker freeze (SIGSTOP, 2 ticks)",
            recovered,
            crashes.n,
            0,
            0,
            f"frozen ticks ≤ {longest:.1f} s wall (deadline 2 s); other jobs unserved: "
            f"{others_missed}",
        )
    finally:
        close()
        broker.stop()


# -- API scenarios --------------------------------------------------------------------------
def settled(rig: ClusterRig, reports: dict[str, Any] | None) -> bool:
    """Every job resized to its plan, nothing unfinished, no write in flight."""
    if not reports:
        return False
    for rt in rig.controller.runtimes.values():
        if rt.state.pending is not None or rt.applying is not None:
            return False
    return all(r.planned is None or r.current == r.planned or r.resized for r in reports.values())


def interval_passes(rig: ClusterRig, wall_s: float = 20.0) -> None:
    """Ticks here follow each other at once on the fake clock; on a cluster 60 s pass
    between them. Writes a tick left running get that time (up to ``wall_s``) to finish."""
    for rt in rig.controller.runtimes.values():
        for fut in (rt.applying, rt.writing):
            if fut is not None:  # a timeout leaves it running, as it may be on a cluster
                with contextlib.suppress(Exception):
                    fut.exception(timeout=wall_s)


def api_fault(tmp: Path, name: str, inject: Callable[[FakeKubeApi], None], **kw: Any) -> Row:
    with FakeKubeApi() as api:
        settings = ControllerSettings(
            identity="bench", act_threads=4, act_deadline_s=kw.pop("deadline", 30.0)
        )
        rig = ClusterRig(api, tmp, jobs=3, settings=settings, store=tmp / "state.sqlite")
        crashes = Crashes()
        inject(api)
        recovered = None
        for tick in range(1, MAX_TICKS + 1):
            reports = crashes.tick(rig.tick)
            if settled(rig, reports):
                recovered = tick - 1  # the tick the fault hit counts as tick 0
                break
            interval_passes(rig)
        for _ in range(3):
            crashes.tick(rig.tick)
        doubles = double_resizes(api) + extra_events(api)
        rig.close()
        return Row(name, recovered, crashes.n, doubles, 0, kw.get("note", ""))


def partial_then_restart(tmp: Path) -> Row:
    """PS written, worker write failing; then the controller is killed and a new one (state
    directory lost) takes over from the marker on the job's status."""
    with FakeKubeApi() as api:
        first = ClusterRig(api, tmp, jobs=3, store=tmp / "a.sqlite")
        api.fail(503, method="PUT", path="-worker/scale", times=15)
        crashes = Crashes()
        crashes.tick(first.tick)
        first.crash()
        second = ClusterRig(
            api, tmp, jobs=3, store=tmp / "b.sqlite", clock=first.clock, identity="kale-1"
        )
        recovered = None
        for tick in range(1, MAX_TICKS + 1):
            if settled(second, crashes.tick(second.tick)):
                recovered = tick
                break
        for _ in range(3):
            crashes.tick(second.tick)
        doubles = double_resizes(api) + extra_events(api)
        second.close()
        return Row(
            "partial resize (PS ok, worker 503) + kill -9 + new pod",
            recovered,
            crashes.n,
            doubles,
            0,
        )


# -- kill -9 scenarios ----------------------------------------------------------------------
def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", WORKER, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_until_killed(proc: subprocess.Popen[str], lines: int) -> tuple[list[str], bool]:
    """(progress lines read, whether the process exited by itself before the kill)."""
    assert proc.stdout is not None
    seen: list[str] = []
    while len(seen) < lines:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            return seen, True
        seen.append(line.strip())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return seen, False


def kill9_mid_write(tmp: Path, kills: int) -> Row:
    path = tmp / "history.sqlite"
    rng = random.Random(11)
    crashes = lost = 0
    for _ in range(kills):
        seen, died = run_until_killed(spawn("history", str(path)), rng.randint(2, 60))
        crashes += died
        committed = int(seen[-1]) if seen else 0
        conn = sqlite3.connect(path)
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        present = conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
        conn.close()
        crashes += not ok
        lost += max(0, committed - present)
    return Row(f"kill -9 mid-write of the history (×{kills})", 0, crashes, 0, lost)


def kill9_mid_tick(tmp: Path, kills: int) -> Row:
    with FakeKubeApi() as api:
        objs = Objects("ml")
        for i in range(3):
            api.put(objs.statefulset(f"job{i}-worker", 1, gpus=1))
            api.put(objs.statefulset(f"job{i}-ps", 1))
            api.put(
                job_doc(
                    f"job{i}",
                    target={"kind": "StatefulSet", "workers": f"job{i}-worker", "ps": f"job{i}-ps"},
                    model="ctr-sync.json",
                )
            )
        kubeconfig = api.kubeconfig(tmp / "kc")
        start = T0 + 86400
        rng = random.Random(7)
        crashes = 0
        recover: list[int] = []
        for _ in range(kills):
            seen, died = run_until_killed(
                spawn("controller", str(kubeconfig), str(tmp), str(start), "3"),
                rng.randint(3, 30),
            )
            crashes += died
            if seen:
                start = float(seen[-1].split()[1]) + 60
        # A last run: how many ticks until nothing is left unfinished.
        proc = spawn("controller", str(kubeconfig), str(tmp), str(start), "3")
        seen, died = run_until_killed(proc, MAX_TICKS)
        crashes += died
        state = sqlite3.connect(tmp / "controller.sqlite")
        ok = state.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = state.execute("SELECT state FROM job_state").fetchall()
        state.close()
        crashes += not ok
        pending = [json.loads(r[0]).get("pending") for r in rows]
        recover.append(0 if not any(pending) else MAX_TICKS)
        writes = len(api.calls("PUT", "/scale"))
        return Row(
            f"kill -9 mid-tick, restart (×{kills}, 3 jobs, rising/falling load)",
            max(recover),
            crashes,
            double_resizes(api),
            0,
            f"{writes} scale writes; state file integrity ok: {ok}",
        )


# -- hostile jobs ---------------------------------------------------------------------------
def hostile(tmp: Path) -> Row:
    rig = HostileRig(tmp)
    crashes = Crashes()
    crashes.tick(rig.tick)
    missed = 0
    for exc in (OverflowError("inf"), MemoryError(), RecursionError("deep"), KeyError("x")):
        for point in ("sample", "decide", "apply", "status"):
            rig.points[point].exc = exc
            reports = crashes.tick(rig.tick)
            missed += sum(not measured(reports, k) for k in ("ml/b", "ml/c"))
            rig.points[point].exc = None
    recovered = None
    for tick in range(1, MAX_TICKS + 1):
        reports = crashes.tick(rig.tick)
        if reports and reports["ml/a"].action != "error" and measured(reports):
            recovered = tick
            break
    rig.controller.close()
    return Row(
        "hostile job: OverflowError/MemoryError/RecursionError/KeyError at 4 points",
        recovered,
        crashes.n,
        0,
        0,
        f"ticks the other jobs went unserved: {missed}",
    )


SCENARIOS: dict[str, Callable[[Path], Row]] = {
    "broker_kill": lambda t: broker_restart(t, down_ticks=2),
    "offsets_backwards": lambda t: broker_restart(t, down_ticks=0),
    "broker_freeze": broker_freeze,
    "api_409": lambda t: api_fault(
        t, "API 409 Conflict on scale writes (×6)", lambda a: a.fail(409, path="/scale", times=6)
    ),
    "api_429": lambda t: api_fault(
        t,
        "API 429 Retry-After 2 s (×8)",
        lambda a: a.fail(429, path="/scale", times=8, retry_after=2),
    ),
    "api_5xx": lambda t: api_fault(
        t, "API 500/503 on every write (×20)", lambda a: a.fail(503, method="PUT", times=20)
    ),
    "api_slow": lambda t: api_fault(
        t,
        "API slow writes (3 s each, tick deadline 1 s)",
        lambda a: a.slow(3.0, method="PUT", path="/scale", times=6),
        deadline=1.0,
    ),
    "api_lost": lambda t: api_fault(
        t,
        "API lost answers (write applied, no reply) ×3",
        lambda a: a.lose(method="PUT", path="/scale", times=3),
    ),
    "partial_resize": partial_then_restart,
    "kill9_mid_tick": lambda t: kill9_mid_tick(t, 3),
    "kill9_mid_write": lambda t: kill9_mid_write(t, 5),
    "hostile_job": hostile,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(SCENARIOS), default=None)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)
    rows: list[Row] = []
    began = time.monotonic()
    for key in args.only or list(SCENARIOS):
        with tempfile.TemporaryDirectory(prefix=f"kale-fault-{key}-") as tmp:
            t = time.monotonic()
            row = SCENARIOS[key](Path(tmp))
            row.note = (row.note + "; " if row.note else "") + f"{time.monotonic() - t:.0f} s"
            rows.append(row)
            print(f"  {key}: done", file=sys.stderr, flush=True)
    headers = ("fault", "ticks to recover", "crashes", "double resizes", "lost history rows")
    cells = [
        (
            r.fault,
            "-" if r.ticks_to_recover is None else str(r.ticks_to_recover),
            str(r.crashes),
            str(r.double_resizes),
            str(r.lost_history_rows),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for c in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))
    for r in rows:
        if r.note:
            print(f"  {r.fault}: {r.note}")
    ok = all(
        r.crashes == 0
        and r.double_resizes == 0
        and r.lost_history_rows == 0
        and r.ticks_to_recover is not None
        and r.ticks_to_recover <= 2
        for r in rows
    )
    print(
        f"targets (0 crashes, 0 double resizes, 0 lost rows, recovery ≤ 2 ticks): "
        f"{'met' if ok else 'MISSED'} ({time.monotonic() - began:.0f} s)"
    )
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps({"rows": [asdict(r) for r in rows], "targets_met": ok}, indent=2) + "\n"
        )
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
