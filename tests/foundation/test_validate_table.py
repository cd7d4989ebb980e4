"""Table tests of `kale validate`: more failure rows than success rows, each row commented.

Each row mutates a known-good job and states the exact line `kale validate` must print.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kale.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

BASE: dict[str, Any] = {
    "apiVersion": "kale.dev/v1alpha1",
    "kind": "ElasticTrainingJob",
    "metadata": {"name": "ctr-model", "namespace": "ml"},
    "spec": {
        "source": {
            "kafka": {
                "bootstrapServers": ["127.0.0.1:9092"],
                "topic": "clicks",
                "consumerGroup": "ctr-trainer",
            }
        },
        "training": {
            "mode": "sync",
            "globalBatchSize": 4096,
            "workersPerPS": 4,
            "minWorkers": 1,
            "maxWorkers": 64,
            "gpusPerWorker": 1,
        },
        "slo": {"maxDelay": "10m"},
        "rescale": {"duration": "5m"},
        "throughput": {"model": "model.json"},
        "forecast": {"model": "kale", "interval": "1m", "horizon": "60m"},
        "target": {"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
    },
}


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = doc
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value


_DELETE = object()

# (id, {path: new value}, expected stderr line after "FILE: ")
FAILURES = [
    # the classic conflict: both fields named
    (
        "min-above-max",
        {"spec.training.minWorkers": 8, "spec.training.maxWorkers": 4},
        "spec.training.minWorkers: must be ≤ spec.training.maxWorkers (8 > 4)",
    ),
    # negative counts are rejected by type, not silently clamped
    (
        "negative-max",
        {"spec.training.maxWorkers": -3},
        "spec.training.maxWorkers: Input should be greater than or equal to 1",
    ),
    # a zero ratio would divide by zero in p = ceil(w / ratio)
    (
        "zero-ratio",
        {"spec.training.workersPerPS": 0},
        "spec.training.workersPerPS: Input should be greater than or equal to 1",
    ),
    # wrong enum value
    (
        "bad-mode",
        {"spec.training.mode": "semi"},
        "spec.training.mode: Input should be 'sync' or 'async'",
    ),
    # wrong target kind
    (
        "bad-target-kind",
        {"spec.target.kind": "Deployment"},
        "spec.target.kind: Input should be 'StatefulSet', 'TFJob', 'Local', 'DryRun', "
        "'PyTorchJob' or 'Scale'",
    ),
    # a mapping where a scalar belongs
    (
        "mapping-for-scalar",
        {"spec.source.kafka.topic": {"name": "clicks"}},
        "spec.source.kafka.topic: Input should be a valid string, got a mapping",
    ),
    # unknown field (typo) is an error, not ignored
    ("unknown-field", {"spec.training.maxWorker": 3}, "spec.training.maxWorker: unknown field"),
    # required field missing
    ("missing-slo", {"spec.slo": _DELETE}, "spec.slo: required field is missing"),
    # durations must parse
    (
        "bad-duration",
        {"spec.slo.maxDelay": "5 minutes"},
        "spec.slo.maxDelay: expected a duration such as 90s, 5m, 1h or 1h30m "
        "(units ms, s, m, h, d, w), got '5 minutes'",
    ),
    # zero SLO makes no sense
    ("zero-slo", {"spec.slo.maxDelay": "0s"}, "spec.slo.maxDelay: Input should be greater than 0"),
    # horizon shorter than the rescale: cannot plan ahead of the load
    (
        "horizon-below-rescale",
        {"spec.forecast.horizon": "3m"},
        "spec.forecast.horizon: must be ≥ spec.rescale.duration so a resize can be planned before "
        "the load arrives (180s < 300s)",
    ),
    # the interval must divide the horizon
    (
        "interval-not-dividing",
        {"spec.forecast.interval": "7m"},
        "spec.forecast.interval: must divide spec.forecast.horizon "
        "(3600s is not a multiple of 420s)",
    ),
    # list items are addressed as .N
    (
        "bad-bootstrap-item",
        {"spec.source.kafka.bootstrapServers": ["127.0.0.1:9092", "nohost"]},
        "spec.source.kafka.bootstrapServers.1: 'nohost' is not host:port",
    ),
    # wrong apiVersion
    (
        "bad-api-version",
        {"apiVersion": "kale.dev/v2"},
        "apiVersion: Input should be 'kale.dev/v1alpha1' or 'kale.dev/v1'",
    ),
    # StatefulSet target needs its names
    (
        "statefulset-without-ps",
        {"spec.target.ps": _DELETE},
        "spec.target.ps: is required when spec.target.kind is StatefulSet (the StatefulSet's name)",
    ),
    # sync mode needs at least one sample per worker
    (
        "batch-below-workers",
        {"spec.training.globalBatchSize": 32},
        "spec.training.globalBatchSize: must be ≥ spec.training.maxWorkers in sync mode: each "
        "worker needs at least one sample per step (32 < 64)",
    ),
    # a string where a count belongs is not coerced
    (
        "string-count",
        {"spec.training.maxWorkers": "64"},
        "spec.training.maxWorkers: Input should be a valid integer, got '64'",
    ),
    # names must be DNS labels
    (
        "bad-name",
        {"metadata.name": "CTR_Model"},
        "metadata.name: 'CTR_Model' is not a DNS-1123 label (lowercase letters, digits, '-', at "
        "most 63 characters)",
    ),
    # unknown forecast model
    (
        "bad-forecast-model",
        {"spec.forecast.model": "prophet"},
        "spec.forecast.model: Input should be 'kale', 'seasonal_naive', 'ets', 'stl_ets' or "
        "'dlinear'",
    ),
    # auto rescale needs the measurement file
    (
        "auto-without-measurement",
        {"spec.rescale.duration": "auto"},
        "spec.rescale.measurement: is required when spec.rescale.duration is auto (the JSON "
        "written by `kale profile`)",
    ),
]

SUCCESSES = [
    # the base document itself
    ("base", {}),
    # async mode with a TFJob target and bare-second durations
    (
        "async-tfjob",
        {
            "spec.training.mode": "async",
            "spec.target": {"kind": "TFJob", "name": "j"},
            "spec.slo.maxDelay": 600,
        },
    ),
    # hour-long forecast steps with a matching horizon
    ("hourly", {"spec.forecast.interval": "1h", "spec.forecast.horizon": "24h"}),
]


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    # a real fitted model: `kale validate` checks the file is one (format kale.throughput/v1)
    (tmp_path / "model.json").write_text((EXAMPLES / "models" / "ctr-sync.json").read_text())
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("changes", "expected"), [r[1:] for r in FAILURES], ids=[r[0] for r in FAILURES]
)
def test_invalid_job_prints_one_line_naming_the_field(tmp_path, capsys, changes, expected):
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        _set(doc, path, value)
    file = _write(tmp_path, doc)
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert f"{file}: {expected}" in err
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize("changes", [r[1] for r in SUCCESSES], ids=[r[0] for r in SUCCESSES])
def test_valid_job_exits_zero(tmp_path, capsys, changes):
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        _set(doc, path, value)
    file = _write(tmp_path, doc)
    assert main(["validate", str(file)]) == 0
    assert "ok" in capsys.readouterr().out


def test_table_has_more_failure_rows_than_success_rows():
    assert len(FAILURES) > len(SUCCESSES)


FILE_FAILURES = [
    # missing file
    ("missing", None, "file not found"),
    # empty file
    ("empty", "", "empty file, expected an ElasticTrainingJob"),
    # YAML syntax error, with its line number
    (
        "syntax",
        "apiVersion: kale.dev/v1alpha1\nkind: [ElasticTrainingJob\nspec: {}\n",
        "syntax error at line 3",
    ),
    # a list at the top
    ("list-root", "- a\n- b\n", "expected a mapping (an ElasticTrainingJob), got a list"),
    # only comments: no document at all
    ("comments-only", "# nothing here\n", "contains no YAML document"),
]


@pytest.mark.parametrize(
    ("content", "expected"), [r[1:] for r in FILE_FAILURES], ids=[r[0] for r in FILE_FAILURES]
)
def test_file_level_problems_get_a_line_not_a_traceback(tmp_path, capsys, content, expected):
    file = tmp_path / "job.yaml"
    if content is not None:
        file.write_text(content)
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{file}: ") and expected in err
    assert "Traceback" not in err


def test_every_problem_gets_its_own_line(tmp_path, capsys):
    doc = copy.deepcopy(BASE)
    _set(doc, "spec.training.mode", "semi")
    _set(doc, "spec.training.maxWorkers", 0)
    file = _write(tmp_path, doc)
    assert main(["validate", str(file)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    assert {line.split(": ")[1] for line in lines} == {
        "spec.training.mode",
        "spec.training.maxWorkers",
    }


def test_missing_throughput_model_is_reported_relative_to_the_job(tmp_path, capsys):
    file = tmp_path / "job.yaml"
    file.write_text(yaml.safe_dump(BASE))
    assert main(["validate", str(file)]) == 2
    assert f"spec.throughput.model: file not found: {tmp_path / 'model.json'}" in (
        capsys.readouterr().err
    )


def test_slo_not_above_rescale_is_a_warning_not_an_error(tmp_path, capsys):
    doc = copy.deepcopy(BASE)
    _set(doc, "spec.slo.maxDelay", "5m")
    file = _write(tmp_path, doc)
    assert main(["validate", str(file)]) == 0
    assert "warning: is ≤ spec.rescale.duration" in capsys.readouterr().err


def test_a_job_written_as_the_retired_v1_is_read_with_a_warning(tmp_path, capsys):
    doc = copy.deepcopy(BASE)
    doc["apiVersion"] = "kale.dev/v1"
    file = _write(tmp_path, doc)
    assert main(["validate", str(file)]) == 0
    err = capsys.readouterr().err
    assert "apiVersion: warning: kale.dev/v1 is deprecated and no longer served by the CRD" in err
    assert "write kale.dev/v1alpha1" in err


def test_shipped_examples_validate(capsys):
    files = sorted(
        str(p)
        for p in EXAMPLES.rglob("*.yaml")
        if yaml.safe_load(p.read_text()).get("kind") == "ElasticTrainingJob"
    )
    assert len(files) >= 2
    assert main(["validate", *files]) == 0, capsys.readouterr().err
    modes = {yaml.safe_load(Path(f).read_text())["spec"]["training"]["mode"] for f in files}
    assert modes >= {"sync", "async"}


def test_rescale_auto_reads_the_measured_median(tmp_path):
    from autoscaler.job.loading import load_job

    doc = copy.deepcopy(BASE)
    doc["spec"]["rescale"] = {"duration": "auto", "measurement": "rescale.json"}
    file = _write(tmp_path, doc)
    (tmp_path / "rescale.json").write_text('{"format": "kale.rescale/v1", "median_s": 42.5}')
    assert load_job(file).rescale_seconds() == 42.5
    (tmp_path / "rescale.json").write_text('{"format": "kale.rescale/v1"}')
    with pytest.raises(Exception, match="has none of median_s"):
        load_job(file).rescale_seconds()
