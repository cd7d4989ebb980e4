"""The CRD refuses what `kale validate` refuses, and the other way round.

Every hostile spec below is refused twice: by the CRD's own schema — bounds, enums, patterns
(evaluated with jsonschema, with Go's RE2 meaning of ``$``) and its CEL rules (evaluated with
cel-python, with the Kubernetes CEL library functions the rules use written out here) — and by
Kale's parser. Every CEL rule names the Python check it mirrors, and the mapping is complete
in both directions.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy import celtypes

from autoscaler.job.crd import build_crd, cel_rules
from autoscaler.job.loading import parse_job
from autoscaler.job.rules import RULES, limit_problems
from autoscaler.job.schema import ElasticTrainingJob

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
BASE = yaml.safe_load((ROOT / "manifests/examples/elastictrainingjob.yaml").read_text())
BASE["metadata"]["namespace"] = "ml"


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """JSON Schema ``pattern`` as the API server runs it: Go's RE2, where ``$`` is the end of
    the text (Python's ``$`` also matches before a final newline)."""
    if isinstance(instance, str) and not re.search(re.sub(r"\$$", r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


Validator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"pattern": _go_pattern})


# -- the Kubernetes CEL libraries the rules use, for cel-python --------------------------
def _matches(text: Any, pattern: Any) -> celtypes.BoolType:
    return celtypes.BoolType(re.search(re.sub(r"\$$", r"\\Z", str(pattern)), str(text)) is not None)


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    found = re.search(str(pattern), str(text))
    return celtypes.StringType(found.group(0) if found else "")


def _find_all(text: Any, pattern: Any) -> celtypes.ListType:
    return celtypes.ListType(
        [celtypes.StringType(m.group(0)) for m in re.finditer(str(pattern), str(text))]
    )


FUNCTIONS = {
    "matches": _matches,
    "find": _find,
    "findAll": _find_all,
    "lowerAscii": lambda text: celtypes.StringType(str(text).lower()),
    "sum": lambda items: sum(items, celtypes.DoubleType(0.0)),
}
ENV = celpy.Environment()
PROGRAMS: dict[str, Any] = {}


def _apply_defaults(schema: dict[str, Any], node: Any) -> None:
    """What the API server does before validating: fill defaults, recursively."""
    if not isinstance(node, dict):
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in node and "default" in sub:
            node[key] = copy.deepcopy(sub["default"])
        if key in node:
            _apply_defaults(sub, node[key])


def _cel_failures(schema: dict[str, Any], node: Any, path: str = "") -> list[str]:
    out = []
    for entry in schema.get("x-kubernetes-validations", []):
        rule = entry["rule"]
        if rule not in PROGRAMS:
            PROGRAMS[rule] = ENV.program(ENV.compile(rule), functions=FUNCTIONS)
        try:
            ok = PROGRAMS[rule].evaluate({"self": celpy.json_to_cel(node)})
        except celpy.CELEvalError as exc:  # the API server refuses on an evaluation error
            ok, entry = False, {"message": f"error: {exc.args[0]}"}
        if not ok:
            out.append(f"{path or '(root)'}: {entry['message']}")
    if isinstance(node, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in node:
                out += _cel_failures(sub, node[key], f"{path}.{key}")
    return out


def crd_refusals(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Why the API server would refuse ``doc``: (schema keyword or "cel", message)."""
    doc = copy.deepcopy(doc)
    _apply_defaults(SCHEMA, doc)
    errors = [(str(e.validator), e.message) for e in Validator(SCHEMA).iter_errors(doc)]
    return errors + [("cel", msg) for msg in _cel_failures(SCHEMA, doc)]


def kale_refusals(doc: dict[str, Any]) -> list[tuple[str, str]]:
    job, problems = parse_job(doc)
    if job is not None and not problems:
        problems = limit_problems(job)
    return problems


def _with(changes: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return doc


_DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ctr-workers"}
_NAMELESS = {"apiVersion": "apps/v1", "kind": "Deployment"}
_INLINE = {"family": "general", "mode": "sync", "theta": [0.1] * 6, "globalBatch": 4096}

# (id, changes, CEL rule or schema keyword the CRD refuses it with)
HOSTILE = [
    # cross-field rules (CEL)
    ("min-above-max", {"spec.training.minWorkers": 9, "spec.training.maxWorkers": 8}, "cel"),
    ("sync-batch-below-workers", {"spec.training.globalBatchSize": 8}, "cel"),
    ("horizon-below-interval", {"spec.forecast.horizon": "30s"}, "cel"),
    ("interval-not-dividing", {"spec.forecast.interval": "7m"}, "cel"),
    ("too-many-steps", {"spec.forecast.interval": "10s", "spec.forecast.horizon": "7d"}, "cel"),
    (
        "horizon-below-rescale",
        {"spec.forecast.horizon": "2m", "spec.rescale.duration": "5m"},
        "cel",
    ),
    ("measurement-without-auto", {"spec.rescale.measurement": "r.json"}, "cel"),
    ("auto-without-measurement", {"spec.rescale.duration": "auto"}, "cel"),
    ("refit-below-interval", {"spec.forecast.refit": "30s"}, "cel"),
    ("statefulset-without-ps", {"spec.target.ps": None}, "cel"),
    ("tfjob-without-name", {"spec.target": {"kind": "TFJob"}}, "cel"),
    ("local-without-command", {"spec.target": {"kind": "Local"}}, "cel"),
    ("pytorchjob-without-name", {"spec.target": {"kind": "PyTorchJob"}}, "cel"),
    ("scale-without-ref", {"spec.target": {"kind": "Scale"}}, "cel"),
    ("scale-ref-on-a-statefulset", {"spec.target.scaleTargetRef": _DEPLOY}, "cel"),
    ("ps-ref-on-a-tfjob", {"spec.target": {"kind": "TFJob", "name": "t", "psRef": _DEPLOY}}, "cel"),
    (
        "ps-ref-is-the-workers",
        {"spec.target": {"kind": "Scale", "scaleTargetRef": _DEPLOY, "psRef": _DEPLOY}},
        "cel",
    ),
    (
        "scale-ref-core-group",
        {"spec.target": {"kind": "Scale", "scaleTargetRef": {**_DEPLOY, "apiVersion": "v1"}}},
        "pattern",
    ),
    (
        "scale-ref-lowercase-kind",
        {"spec.target": {"kind": "Scale", "scaleTargetRef": {**_DEPLOY, "kind": "deployment"}}},
        "pattern",
    ),
    (
        "scale-ref-without-name",
        {"spec.target": {"kind": "Scale", "scaleTargetRef": _NAMELESS}},
        "required",
    ),
    ("bad-name", {"metadata.name": "CTR_Model"}, "cel"),
    ("name-with-newline", {"metadata.name": "ctr\n"}, "cel"),
    # durations: grammar (pattern) and range (CEL for strings, minimum/maximum for integers)
    ("slo-inf", {"spec.slo.maxDelay": "inf"}, "pattern"),
    ("slo-Infinity", {"spec.slo.maxDelay": "Infinity"}, "pattern"),
    ("slo-1e400", {"spec.slo.maxDelay": "1e400"}, "pattern"),
    ("slo-fullwidth-digit", {"spec.slo.maxDelay": "５m"}, "pattern"),
    ("slo-eight-days", {"spec.slo.maxDelay": "8d"}, "cel"),
    ("interval-1ms", {"spec.forecast.interval": "1ms", "spec.forecast.horizon": "1s"}, "cel"),
    ("interval-5-seconds", {"spec.forecast.interval": 5, "spec.forecast.horizon": 60}, "minimum"),
    ("horizon-huge-weeks", {"spec.forecast.horizon": "99999999999w"}, "cel"),
    ("horizon-huge-int", {"spec.forecast.horizon": 99999999999}, "maximum"),
    ("rescale-two-days", {"spec.rescale.duration": "2d", "spec.forecast.horizon": "3d"}, "cel"),
    ("rescale-word", {"spec.rescale.duration": "automatic"}, "pattern"),
    # bounds, enums, patterns, lengths
    ("workers-too-many", {"spec.training.maxWorkers": 10_001}, "maximum"),
    ("ratio-zero", {"spec.training.workersPerPS": 0}, "minimum"),
    ("gpus-too-many", {"spec.training.gpusPerWorker": 65}, "maximum"),
    ("quantile-one", {"spec.forecast.quantile": 1.0}, "maximum"),
    ("priority-huge", {"spec.priority": 2_000_000_000}, "maximum"),
    ("bad-mode", {"spec.training.mode": "semi"}, "enum"),
    ("bad-kind", {"spec.target.kind": "Deployment"}, "enum"),
    ("bad-forecaster", {"spec.forecast.model": "prophet"}, "enum"),
    ("topic-space", {"spec.source.kafka.topic": "a b"}, "pattern"),
    ("port-out-of-range", {"spec.source.kafka.bootstrapServers": ["kafka:99999"]}, "pattern"),
    ("decimal-ip-host", {"spec.source.kafka.bootstrapServers": ["2130706433:9092"]}, "pattern"),
    ("too-many-brokers", {"spec.source.kafka.bootstrapServers": ["k.svc:9092"] * 33}, "maxItems"),
    ("model-passwd", {"spec.throughput.model": "/etc/passwd"}, "pattern"),
    ("group-control-char", {"spec.source.kafka.consumerGroup": "g\x07"}, "pattern"),
    ("target-name-upper", {"spec.target.workers": "Worker"}, "pattern"),
    ("long-command-arg", {"spec.target.command": ["x" * 5000]}, "maxLength"),
    # throughput sources: exactly one; inline coefficients as many as the family has
    ("no-throughput-source", {"spec.throughput": {}}, "cel"),
    ("two-throughput-sources", {"spec.throughput.model": "m.json"}, "cel"),
    ("inline-theta-count", {"spec.throughput": {"inline": {**_INLINE, "theta": [1.0]}}}, "cel"),
    (
        "inline-negative-theta",
        {"spec.throughput": {"inline": {**_INLINE, "theta": [-1.0] * 6}}},
        "minimum",
    ),
    ("inline-bad-family", {"spec.throughput": {"inline": {**_INLINE, "family": "magic"}}}, "enum"),
    ("configmap-bad-key", {"spec.throughput.configMapRef": {"name": "m", "key": "a/b"}}, "pattern"),
    # pins: the scale subresource's field is bounded like maxWorkers
    ("replicas-negative", {"spec.replicas": -1}, "minimum"),
    ("replicas-huge", {"spec.replicas": 10_001}, "maximum"),
]


@pytest.mark.parametrize(("changes", "how"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_the_crd_and_kale_validate_both_refuse(changes, how):
    doc = _with(changes)
    crd = crd_refusals(doc)
    assert how in {kind for kind, _ in crd}, f"the CRD does not refuse it by {how}: {crd}"
    assert kale_refusals(doc), "kale validate would accept it"


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "manifests/examples/elastictrainingjob.yaml",
        ROOT / "manifests/examples/elastictrainingjob-tfjob.yaml",
        ROOT / "examples/ctr-sync.yaml",
        ROOT / "examples/ctr-async.yaml",
        ROOT / "examples/local/ctr-trainer.yaml",
        ROOT / "examples/ctr-pytorchjob.yaml",
        ROOT / "examples/ctr-scale.yaml",
    ],
    ids=lambda p: p.name,
)
def test_valid_jobs_pass_both(path):
    doc = yaml.safe_load(path.read_text())
    assert crd_refusals(doc) == []
    assert kale_refusals(doc) == []


def test_durations_in_every_form_kale_accepts_pass_the_crd():
    for value in ["90", "90s", "1m30s", "1.5h", "1H", "2d", "1w", 600, "600000ms"]:
        doc = _with({"spec.slo.maxDelay": value})
        assert crd_refusals(doc) == [], value
        assert kale_refusals(doc) == [], value


def test_every_python_rule_has_a_cel_mirror_and_every_cel_rule_a_python_check():
    rules = cel_rules()
    mirrored = {r.mirrors for r in rules}
    assert set(RULES) <= mirrored, f"no CEL rule for {set(RULES) - mirrored}"
    fields = ElasticTrainingJob.model_json_schema(by_alias=True)
    for name in mirrored - set(RULES):
        assert name.startswith("field:"), name
        *parents, last = name.removeprefix("field:").split(".")
        model: Any = ElasticTrainingJob
        for part in parents:
            model = model.model_fields[_attr(model, part)].annotation
        assert _attr(model, last), f"{name}: no such field"
    assert fields  # the model's own schema is generated without error


def test_every_cel_rule_in_the_crd_is_a_known_rule_and_compiles():
    known = {r.rule for r in cel_rules()}
    found = []

    def walk(node: dict[str, Any]) -> None:
        found.extend(e["rule"] for e in node.get("x-kubernetes-validations", []))
        for sub in node.get("properties", {}).values():
            walk(sub)
        if "items" in node:
            walk(node["items"])

    walk(SCHEMA)
    assert found and set(found) <= known
    assert len(found) == len(cel_rules())
    for rule in found:
        ENV.compile(rule)  # raises on a syntax error


def _attr(model: Any, alias: str) -> str:
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias or name == alias:
            return name
    raise AssertionError(f"{model.__name__} has no field {alias}")
