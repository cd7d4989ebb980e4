"""Hostile job files through `kale validate`: no traceback, exit 0 or 2, ≤ 1 s and ≤ 200 MB each.

Generates every known defect of job files (inf/Infinity/1e400/"５m" durations, 99999999999w,
1 ms intervals, 500-deep nesting, 1 MB and 10 MB flow lists, names with a trailing newline,
duplicate keys, /etc/passwd as the model, a Local target with a shell, the metadata service
as a broker) plus seeded random mutations of a valid job — type confusion, huge/negative/NaN
numbers, deep nesting, long strings, duplicate keys, bad unicode, binary garbage, anchors,
aliases and billion-laughs bombs — and runs ``kale validate`` on each in its own process
under an address-space limit, measuring exit code, traceback, seconds and peak RSS.

    python -m benchmarks.hostile_jobs --count 1000 --json-out out/hostile.json

Cases named ``cluster-*`` run with ``--config`` of a cluster-mode controller.yaml (the
platform's default policy). "s" is the CPU time of the process (user + system, from
``wait4``): on a shared two-core machine wall time mostly measures the neighbours, so it is
reported beside it (``wall_seconds``) but the 1 s target is judged on CPU time. Exit code 1
when any target is missed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from benchmarks.paths import ROOT

BASE: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "ctr-sync.yaml").read_text())
BASE["spec"]["throughput"]["model"] = "model.json"
MEMORY_LIMIT = 1024 * 1024 * 1024  # address space per run: a runaway dies, it cannot swap


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node
    node[last] = value
    return doc


def _bomb(levels: int, width: int = 9) -> bytes:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return ("\n".join(lines) + "\n").encode()


def named_cases() -> Iterator[tuple[str, bytes]]:
    """Each known defect reproduced, and the classic document attacks."""
    fields = {
        "slo-inf": ("spec.slo.maxDelay", float("inf")),
        "slo-Infinity": ("spec.slo.maxDelay", "Infinity"),
        "slo-1e400": ("spec.slo.maxDelay", "1e400"),
        "slo-nan": ("spec.slo.maxDelay", float("nan")),
        "slo-fullwidth-digit": ("spec.slo.maxDelay", "５m"),
        "slo-arabic-digit": ("spec.slo.maxDelay", "٥m"),
        "horizon-99999999999w": ("spec.forecast.horizon", "99999999999w"),
        "interval-1ms": ("spec.forecast.interval", "1ms"),
        "name-trailing-newline": ("metadata.name", "ctr-model\n"),
        "topic-trailing-newline": ("spec.source.kafka.topic", "clicks\n"),
        "model-etc-passwd": ("spec.throughput.model", "/etc/passwd"),
        "model-dev-zero-json": ("spec.throughput.model", "/dev/zero.json"),
        "model-directory-json": ("spec.throughput.model", "/tmp/"),
        "workers-huge-int": ("spec.training.maxWorkers", 10**30),
        "batch-negative": ("spec.training.globalBatchSize", -4096),
        "quantile-nan": ("spec.forecast.quantile", float("nan")),
        "priority-huge": ("spec.priority", 2**63),
        "command-nul": ("spec.target", {"kind": "Local", "command": ["sh\x00", "-c"]}),
        "cluster-local-shell": ("spec.target", {"kind": "Local", "command": ["sh", "-c", "id"]}),
        "cluster-metadata-broker": ("spec.source.kafka.bootstrapServers", ["169.254.169.254:80"]),
        "cluster-decimal-ip-broker": ("spec.source.kafka.bootstrapServers", ["2130706433:80"]),
    }
    for name, (path, value) in fields.items():
        yield name, _dump(_set(BASE, path, value))
    yield "nesting-500", b"apiVersion: kale.dev/v1alpha1\nspec: " + b"[" * 500 + b"]" * 500 + b"\n"
    yield "nesting-500-block", ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 500))).encode()
    yield "flow-list-1MB", b"spec: [" + b"1, " * 349_525 + b"1]\n"
    yield "flow-list-10MB", b"spec: [" + b"1, " * 3_495_253 + b"1]\n"
    yield "flow-list-200KB", b"spec: [" + b"1, " * 68_000 + b"1]\n"
    yield "duplicate-key", _dump(BASE) + b"kind: ElasticTrainingJob\n"
    yield "billion-laughs", _bomb(9)
    yield "recursive-alias", b"a: &a [*a]\n"
    yield "binary-garbage", bytes(random.Random(7).randrange(256) for _ in range(4096))
    yield "utf16-bom", "kind: x\n".encode("utf-16")
    yield "lone-surrogate-escape", b'metadata: {name: "\\ud800"}\n'
    yield "int-5000-digits", b"spec: " + b"9" * 5000 + b"\n"
    yield "long-string-200KB", _dump(_set(BASE, "metadata.name", "a" * 200_000))
    yield "python-tag", b"!!python/object/apply:os.system ['id']\n"
    yield "merge-key-bomb", b"a: &a {x: 1}\nb: {<<: [*a, *a, *a]}\n"


_SCALARS: list[Any] = [
    None,
    True,
    0,
    -1,
    10**18,
    -(10**30),
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    " ",
    "x" * 5000,
    "\u202e",
    "５",
    "0x7f",
    "1e3",
    "-5m",
    "1h30",
    "auto",
    "null",
    "~",
    [],
    {},
    [1, [2, [3]]],
    {"a": {"b": {"c": 1}}},
]


def _paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            yield from _paths(value, path)


def random_case(rng: random.Random) -> bytes:
    """A valid job with 1–4 random mutations, or a random document attack."""
    roll = rng.random()
    if roll < 0.08:
        depth = rng.choice([20, 40, 100, 1000, 3000])
        open_, close = rng.choice([(b"[", b"]"), (b"{a: ", b"}")])
        return b"spec: " + open_ * depth + b"1" + close * depth + b"\n"
    if roll < 0.14:
        return _bomb(rng.randint(3, 12), rng.randint(2, 12))
    if roll < 0.20:
        size = rng.choice([10, 1000, 100_000, 300_000])
        return bytes(rng.randrange(256) for _ in range(min(size, 20_000))) * (size // 20_000 + 1)
    if roll < 0.26:
        text = _dump(BASE).decode()
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        lines.insert(i + 1, lines[i])  # a duplicated line: often a duplicate key
        return "".join(lines).encode()
    doc = copy.deepcopy(BASE)
    for _ in range(rng.randint(1, 4)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        value = rng.choice(_SCALARS)
        if rng.random() < 0.2:
            value = "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randint(1, 40)))
        doc = _set(doc, path, copy.deepcopy(value))
    try:
        out = _dump(doc)
    except (yaml.YAMLError, ValueError):
        out = json.dumps(doc, default=str).encode()
    if rng.random() < 0.1:  # corrupt a byte
        pos = rng.randrange(len(out))
        out = out[:pos] + bytes([rng.randrange(256)]) + out[pos + 1 :]
    return out


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_one(path: Path, config: Path | None) -> dict[str, Any]:
    """``kale validate`` on one file in its own process; RSS from ``wait4`` of that process."""
    argv = [sys.executable, "-m", "kale.cli.main", "validate"]
    argv += ["--config", str(config), str(path)] if config else [str(path)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            preexec_fn=_limit_memory,
            env={**os.environ, "KALE_DEBUG": "1"},  # an internal error prints its traceback
        )
        timer = threading.Timer(60.0, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    lines = stderr.splitlines() or stdout.splitlines() or [""]
    return {
        "file": path.name,
        "exit": proc.returncode,
        "seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "wall_seconds": round(seconds, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "traceback": "Traceback" in stderr,
        "lines": len(stderr.splitlines()),
        "first_line": lines[0].replace(str(path), "FILE")[:150],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="Random cases (plus the named ones).")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--workdir", type=Path, default=ROOT / "out" / "hostile-jobs")
    ap.add_argument("--jobs", type=int, default=2, help="Files validated at the same time.")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args(argv)

    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("*.yaml"):
        old.unlink()
    (work / "model.json").write_text((ROOT / "examples/models/ctr-sync.json").read_text())
    config = work / "cluster-controller.yaml"
    config.write_text("jobs: {namespaces: [], modelsDir: .}\n")
    rng = random.Random(args.seed)
    cases: list[tuple[str, bytes]] = list(named_cases())
    cases += [(f"random-{i:04d}", random_case(rng)) for i in range(args.count)]
    for name, data in cases:
        (work / f"{name}.yaml").write_bytes(data)

    def measure(case: tuple[str, bytes]) -> dict[str, Any]:
        name = case[0]
        row = run_one(work / f"{name}.yaml", config if name.startswith("cluster-") else None)
        row["bytes"] = len(case[1])
        return row

    rows = _measure_all(cases, measure, args.jobs)
    return _report(rows, args.json_out)


def _measure_all(
    cases: list[tuple[str, bytes]],
    measure: Callable[[tuple[str, bytes]], dict[str, Any]],
    jobs: int,
) -> list[dict[str, Any]]:
    """Run every case; peak RSS per file comes from ``wait4`` on its own process."""
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, row in enumerate(pool.map(measure, cases), 1):
            rows.append(row)
            if i % 100 == 0:
                print(f"  {i}/{len(cases)} files", file=sys.stderr)
    return rows


MAX_SECONDS, MAX_RSS_MB = 1.0, 200.0


def _report(rows: list[dict[str, Any]], json_out: Path | None) -> int:
    seconds = sorted(r["seconds"] for r in rows)
    rss = sorted(r["peak_rss_mb"] for r in rows)
    summary = {
        "files": len(rows),
        "exit_0": sum(r["exit"] == 0 for r in rows),
        "exit_2": sum(r["exit"] == 2 for r in rows),
        "exit_other": sum(r["exit"] not in (0, 2) for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "over_1s": sum(r["seconds"] > MAX_SECONDS for r in rows),
        "over_200MB": sum(r["peak_rss_mb"] > MAX_RSS_MB for r in rows),
        "p50_s": seconds[len(seconds) // 2],
        "p99_s": seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))],
        "max_s": seconds[-1],
        "max_rss_mb": rss[-1],
        "max_wall_s": max(r["wall_seconds"] for r in rows),
    }
    print("\nnamed cases (known defects and document attacks)")
    print(f"{'case':28} {'exit':>4} {'cpu s':>6} {'MB':>6}  first line of stderr")
    for r in rows:
        if not r["file"].startswith("random-"):
            print(
                f"{r['file'][:-5]:28} {r['exit']:>4} {r['seconds']:>6.2f} "
                f"{r['peak_rss_mb']:>6.1f}  {r['first_line'][:90]}"
            )
    print("\nsummary")
    for key, value in summary.items():
        print(f"  {key:12} {value}")
    bad = [
        r
        for r in rows
        if r["traceback"]
        or r["exit"] not in (0, 2)
        or r["seconds"] > MAX_SECONDS
        or r["peak_rss_mb"] > MAX_RSS_MB
    ]
    for r in bad[:20]:
        print(f"  MISSED {r['file']}: exit {r['exit']}, {r['seconds']}s, {r['peak_rss_mb']} MB")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
