"""Hostile job files: each gets one clear line per problem and exit 2 — never a traceback.

In process (subprocesses are slow); `benchmarks/hostile_jobs.py` runs a thousand such files
through the real CLI with a memory limit and measures time and memory. Each row is a
reproduction from issue 34 or a classic attack on YAML parsers, with the line it must print.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.durations import parse_duration
from kale.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = yaml.safe_load((ROOT / "examples/ctr-sync.yaml").read_text())
BASE["spec"]["throughput"]["model"] = "model.json"


def _doc(path: str, value: Any) -> bytes:
    doc = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _bomb(levels: int) -> bytes:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return ("\n".join(lines) + "\n").encode()


# (id, file content, what the line after "FILE" must contain)
CASES = [
    # durations: only finite ASCII values within each field's range reach the planner
    ("slo-inf", _doc("spec.slo.maxDelay", float("inf")), ": spec.slo.maxDelay: must be a finite"),
    ("slo-Infinity", _doc("spec.slo.maxDelay", "Infinity"), "infinite and NaN durations"),
    ("slo-1e400", _doc("spec.slo.maxDelay", "1e400"), "no exponents"),
    ("slo-nan", _doc("spec.slo.maxDelay", float("nan")), "must be a finite number"),
    ("slo-fullwidth-5m", _doc("spec.slo.maxDelay", "５m"), "in ASCII digits"),
    ("slo-eight-days", _doc("spec.slo.maxDelay", "8d"), ": spec.slo.maxDelay: Input should be"),
    ("horizon-99999999999w", _doc("spec.forecast.horizon", "99999999999w"), "at most 10 years"),
    ("horizon-two-weeks", _doc("spec.forecast.horizon", "2w"), ": spec.forecast.horizon:"),
    ("interval-1ms", _doc("spec.forecast.interval", "1ms"), ": spec.forecast.interval:"),
    ("interval-5s", _doc("spec.forecast.interval", "5s"), "must be ≥ 10s"),
    ("rescale-negative", _doc("spec.rescale.duration", "-5m"), ": spec.rescale.duration:"),
    # names are matched whole: a trailing newline is not part of a name
    ("name-newline", _doc("metadata.name", "ctr-model\n"), "'ctr-model\\n' is not a DNS-1123"),
    ("topic-newline", _doc("spec.source.kafka.topic", "clicks\n"), "not a valid Kafka topic"),
    ("host-decimal-ip", _doc("spec.source.kafka.bootstrapServers", ["2130706433:80"]), "host"),
    # numbers that would reach arithmetic or memory
    ("workers-10e30", _doc("spec.training.maxWorkers", 10**30), "less than or equal to 10000"),
    ("quantile-nan", _doc("spec.forecast.quantile", float("nan")), "finite number"),
    ("priority-2e63", _doc("spec.priority", 2**63), "less than or equal to 1000000000"),
    # referenced files: the expected kind of file, not just an existing one
    ("model-etc-passwd", _doc("spec.throughput.model", "/etc/passwd"), "throughput model"),
    ("model-not-a-model", _doc("spec.throughput.model", "notmodel.json"), "not a throughput"),
    ("model-a-directory", _doc("spec.throughput.model", "dir.json"), "is a directory"),
    # the document itself: FILE:LINE: reason
    ("nesting-500", b"spec: " + b"[" * 500 + b"]" * 500 + b"\n", ":1: nesting deeper than 32"),
    ("duplicate-key", _doc("kind", "ElasticTrainingJob") + b"kind: X\n", "duplicate key 'kind'"),
    ("billion-laughs", _bomb(9), "more than 20000 values"),
    ("recursive-alias", b"a: &a [*a]\n", "alias *a refers to no complete anchor"),
    ("flow-list-1MB", b"spec: [" + b"1, " * 349_525 + b"1]\n", "at most 262144 are accepted"),
    ("flow-list-100KB", b"spec: [" + b"1, " * 34_000 + b"1]\n", "more than 20000 values"),
    ("binary-garbage", bytes(range(256)) * 4, "is not UTF-8 text"),
    ("boolean-key", _doc("metadata.name", "x") + b"on: 1\n", "keys must be strings"),
    ("int-5000-digits", b"spec: " + b"9" * 5000 + b"\n", "cannot be read as YAML"),
    ("python-tag", b"!!python/object/apply:os.system ['id']\n", "syntax error"),
    ("nul-in-string", _doc("spec.source.kafka.consumerGroup", "g\x00"), "NUL"),
]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    model = (ROOT / "examples/models/ctr-sync.json").read_text()
    (tmp_path / "model.json").write_text(model)
    (tmp_path / "notmodel.json").write_text('{"format": "something/v1"}')
    (tmp_path / "dir.json").mkdir()
    return tmp_path


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hostile_file_gets_one_clear_line_and_exit_2(workdir, capsys, content, expected):
    file = workdir / "job.yaml"
    file.write_bytes(content)
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "Traceback" not in err and lines
    assert all(line.startswith(f"{file}:") for line in lines), lines
    assert any(expected in line for line in lines), lines


def test_the_valid_base_passes(workdir, capsys):
    file = workdir / "job.yaml"
    file.write_bytes(_doc("metadata.name", "ctr-model"))
    assert main(["validate", str(file)]) == 0, capsys.readouterr().err


def test_anchors_and_aliases_within_bounds_are_fine(workdir, capsys):
    text = _doc("metadata.name", "ctr-model").decode()
    text = text.replace("bootstrapServers:", "bootstrapServers: &brokers") + "\n"
    file = workdir / "job.yaml"
    file.write_text(text)
    assert main(["validate", str(file)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "text", ["inf", "nan", "1e3", "５m", "1_000", "0x10", "+5m", "5 m", "1h30", "", "x" * 65]
)
def test_durations_refuse_what_float_would_accept(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("1.5m", 90), ("1h30m", 5400), ("1W", 604800), (7, 7)]
)
def test_durations_people_write_still_parse(text, seconds):
    assert parse_duration(text) == seconds
