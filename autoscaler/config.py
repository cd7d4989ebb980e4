"""The ElasticTrainingJob: what an ML engineer submits, and the checks it must pass.

Kubernetes-shaped (apiVersion/kind/metadata/spec, camelCase fields) so the same file can be
applied as a custom resource. Parsing happens in two layers, as in KEDA's scalers:

1. pydantic models with ``extra="forbid"`` check types, enums, ranges and unknown fields;
2. :func:`cross_check`, a pure function, checks relations between fields and names both
   fields of every conflict.

Every problem comes back as ``(dotted.field.path, reason)`` so the CLI can print
``FILE: spec.training.minWorkers: reason`` lines, one per problem, never a traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from autoscaler.durations import parse_duration
from autoscaler.errors import UserError

API_VERSION = "kale.dev/v1"
KIND = "ElasticTrainingJob"
FORECAST_MODELS = ("kale", "seasonal_naive", "ets", "stl_ets", "dlinear")
TARGET_KINDS = ("StatefulSet", "TFJob", "Local", "DryRun")
# Keys of the rescale measurement JSON, in order of preference (kale.rescale/v1 writes median_s).
MEASUREMENT_KEYS = ("median_s", "rescale_s", "duration_s", "total_s")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_HOSTPORT = re.compile(r"^[^\s:/]+:\d{1,5}$")


def _duration(value: Any) -> float:
    if isinstance(value, dict | list):
        raise ValueError(f"expected a duration such as 90s, 5m or 1h, got a {_kind(value)}")
    return parse_duration(value)


def _kind(value: Any) -> str:
    return (
        "mapping"
        if isinstance(value, dict)
        else "list"
        if isinstance(value, list)
        else (type(value).__name__)
    )


Duration = Annotated[float, BeforeValidator(_duration)]
PositiveDuration = Annotated[float, BeforeValidator(_duration), Field(gt=0)]
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]


class _Model(BaseModel):
    """Base: camelCase on the wire, unknown fields are errors, immutable once loaded."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Metadata(_Model):
    name: str = Field(description="Job name (a DNS-1123 label).")
    namespace: str = Field(default="default", description="Kubernetes namespace.")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class KafkaSource(_Model):
    bootstrap_servers: list[str] = Field(min_length=1, description="host:port of the brokers.")
    topic: str = Field(description="Topic the training samples arrive on.")
    consumer_group: str = Field(min_length=1, description="Consumer group of the trainer.")


class Source(_Model):
    kafka: KafkaSource


class Training(_Model):
    mode: Literal["sync", "async"] = Field(description="Synchronous or asynchronous PS training.")
    global_batch_size: PositiveInt = Field(description="Global batch M, constant while scaling.")
    workers_per_ps: PositiveInt = Field(
        alias="workersPerPS", description="w/p ratio kept while scaling."
    )
    min_workers: PositiveInt = Field(default=1, description="Guaranteed minimum workers.")
    max_workers: PositiveInt = Field(description="Upper bound on workers.")
    gpus_per_worker: NonNegativeInt = Field(default=1, description="GPUs each worker pod holds.")


class Slo(_Model):
    max_delay: PositiveDuration = Field(description="Max age of the oldest unconsumed sample.")


class Rescale(_Model):
    duration: Literal["auto"] | PositiveDuration = Field(
        description="Downtime of one resize, or 'auto' to use the measured value."
    )
    measurement: str | None = Field(
        default=None,
        description="JSON written by `kale profile` (used when duration is auto); relative "
        "paths are relative to the job file.",
    )
    max_per_hour: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Most resizes the planner starts in any hour (each stops the job).",
    )


class ThroughputRef(_Model):
    model: str = Field(description="Throughput model JSON (from `kale throughput fit`).")


class Forecast(_Model):
    model: Literal["kale", "seasonal_naive", "ets", "stl_ets", "dlinear"] = "kale"
    interval: PositiveDuration = Field(default=60.0, description="Step of the arrival history.")
    horizon: PositiveDuration = Field(default=3600.0, description="How far ahead to forecast.")
    refit: PositiveDuration = Field(default=86400.0, description="How often to refit.")
    quantile: float = Field(default=0.9, gt=0.5, lt=1.0, description="Upper quantile planned for.")


class Target(_Model):
    kind: Literal["StatefulSet", "TFJob", "Local", "DryRun"]
    workers: str | None = Field(default=None, description="Worker StatefulSet name.")
    ps: str | None = Field(default=None, description="PS StatefulSet name.")
    name: str | None = Field(default=None, description="TFJob name.")
    command: list[str] | None = Field(default=None, description="Local worker command.")
    processes: Literal["perWorker", "perJob"] = Field(
        default="perWorker",
        description="Local: one copy of the command per worker, or one "
        "per job that starts its own workers and PS from {workers} and {ps} (kale train).",
    )


class Spec(_Model):
    source: Source
    training: Training
    slo: Slo
    rescale: Rescale
    throughput: ThroughputRef
    forecast: Forecast = Forecast()
    target: Target
    priority: int = Field(default=0, strict=True, description="Higher wins when GPUs are short.")


class ElasticTrainingJob(_Model):
    api_version: Literal["kale.dev/v1"]
    kind: Literal["ElasticTrainingJob"]
    metadata: Metadata
    spec: Spec


Problem = tuple[str, str]  # (dotted.field.path, reason)


def cross_check(job: ElasticTrainingJob) -> list[Problem]:
    """Relations between fields; every message names both fields of a conflict."""
    out: list[Problem] = []
    md, sp = job.metadata, job.spec
    tr, fc, rs = sp.training, sp.forecast, sp.rescale
    if not _DNS_LABEL.match(md.name) or len(md.name) > 63:
        out.append(
            (
                "metadata.name",
                f"{md.name!r} is not a DNS-1123 label "
                "(lowercase letters, digits, '-', at most 63 characters)",
            )
        )
    if not _DNS_LABEL.match(md.namespace) or len(md.namespace) > 63:
        out.append(("metadata.namespace", f"{md.namespace!r} is not a DNS-1123 label"))
    for i, server in enumerate(sp.source.kafka.bootstrap_servers):
        if not _HOSTPORT.match(server) or not 0 < int(server.rsplit(":", 1)[1]) < 65536:
            out.append((f"spec.source.kafka.bootstrapServers.{i}", f"{server!r} is not host:port"))
    if not _TOPIC.match(sp.source.kafka.topic):
        out.append(
            (
                "spec.source.kafka.topic",
                f"{sp.source.kafka.topic!r} is not a valid Kafka "
                "topic name (letters, digits, '.', '_', '-'; at most 249)",
            )
        )
    if tr.min_workers > tr.max_workers:
        out.append(
            (
                "spec.training.minWorkers",
                f"must be ≤ spec.training.maxWorkers ({tr.min_workers} > {tr.max_workers})",
            )
        )
    if tr.mode == "sync" and tr.global_batch_size < tr.max_workers:
        out.append(
            (
                "spec.training.globalBatchSize",
                f"must be ≥ spec.training.maxWorkers in sync "
                f"mode: each worker needs at least one sample per step "
                f"({tr.global_batch_size} < {tr.max_workers})",
            )
        )
    if fc.horizon < fc.interval:
        out.append(
            (
                "spec.forecast.horizon",
                f"must be ≥ spec.forecast.interval ({fc.horizon:g}s < {fc.interval:g}s)",
            )
        )
    elif not _divides(fc.interval, fc.horizon):
        out.append(
            (
                "spec.forecast.interval",
                f"must divide spec.forecast.horizon "
                f"({fc.horizon:g}s is not a multiple of {fc.interval:g}s)",
            )
        )
    if rs.duration != "auto":
        if fc.horizon < rs.duration:
            out.append(
                (
                    "spec.forecast.horizon",
                    f"must be ≥ spec.rescale.duration so a resize can "
                    f"be planned before the load arrives ({fc.horizon:g}s < {rs.duration:g}s)",
                )
            )
        if rs.measurement is not None:
            out.append(
                ("spec.rescale.measurement", "is only used with spec.rescale.duration: auto")
            )
    if fc.refit < fc.interval:
        out.append(
            (
                "spec.forecast.refit",
                f"must be ≥ spec.forecast.interval ({fc.refit:g}s < {fc.interval:g}s)",
            )
        )
    tg = sp.target
    if tg.kind == "StatefulSet":
        for field in ("workers", "ps"):
            if not getattr(tg, field):
                out.append(
                    (
                        f"spec.target.{field}",
                        "is required when spec.target.kind is StatefulSet (the StatefulSet's name)",
                    )
                )
    if tg.kind == "TFJob" and not tg.name:
        out.append(("spec.target.name", "is required when spec.target.kind is TFJob"))
    for field in ("workers", "ps", "name"):
        value = getattr(tg, field)
        if value and not _DNS_LABEL.match(value):
            out.append((f"spec.target.{field}", f"{value!r} is not a DNS-1123 name"))
    return out


def advisories(job: ElasticTrainingJob) -> list[Problem]:
    """Legal but risky settings, reported as warnings (exit code stays 0)."""
    out: list[Problem] = []
    rs = job.spec.rescale.duration
    if rs != "auto" and job.spec.slo.max_delay <= rs:
        out.append(
            (
                "spec.slo.maxDelay",
                f"is ≤ spec.rescale.duration ({job.spec.slo.max_delay:g}s "
                f"≤ {rs:g}s): every resize will violate the SLO; an SLO of about twice the "
                "rescale duration leaves room to plan",
            )
        )
    return out


def _divides(small: float, big: float) -> bool:
    ratio = big / small
    return abs(ratio - round(ratio)) < 1e-9


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) if loc else "(root)"


_TYPE_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def _format_error(err: dict[str, Any]) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # Union branches (e.g. 'auto' | duration) add their own tag to the location: drop it.
    loc = tuple(p for p in loc if p not in ("literal['auto']", "float"))
    kind = err["type"]
    msg = _TYPE_MESSAGES.get(kind, err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        msg = f"expected a mapping, got a {_kind(err.get('input'))}"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        given = err.get("input")
        if isinstance(given, dict | list):
            msg = f"{msg}, got a {_kind(given)}"
        elif kind != "missing":
            msg = f"{msg}, got {given!r}"
    return _format_loc(loc), msg


def parse_job(data: Any) -> tuple[ElasticTrainingJob | None, list[Problem]]:
    """Validate a loaded YAML document; return the job (or None) and every problem found."""
    if not isinstance(data, dict):
        return None, [
            ("(root)", f"expected a mapping (an ElasticTrainingJob), got a {_kind(data)}")
        ]
    try:
        job = ElasticTrainingJob.model_validate(data)
    except ValidationError as exc:
        problems = [_format_error(e) for e in exc.errors()]  # type: ignore[arg-type]
        return None, _dedupe(problems)
    return job, cross_check(job)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    """One line per field: unions report each branch's failure, the first one says enough."""
    seen: dict[str, str] = {}
    for path, msg in problems:
        seen.setdefault(path, msg)
    return list(seen.items())


def read_yaml(path: Path) -> tuple[Any, list[Problem]]:
    """Read one YAML document; file problems come back as ``(root)`` problems."""
    if not path.exists():
        return None, [("(file)", "file not found")]
    if path.is_dir():
        return None, [("(file)", "is a directory, expected a YAML file")]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [("(file)", f"cannot read: {exc}")]
    if not text.strip():
        return None, [("(file)", "empty file, expected an ElasticTrainingJob")]
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return None, [("(yaml)", f"syntax error at {where}: {problem}")]
    if not docs:
        return None, [("(file)", "contains no YAML document")]
    if len(docs) > 1:
        return None, [
            (
                "(file)",
                f"contains {len(docs)} YAML documents; put one ElasticTrainingJob in each file",
            )
        ]
    return docs[0], []


class LoadedJob:
    """A validated job plus where it came from, so relative paths resolve against its file."""

    def __init__(self, job: ElasticTrainingJob, path: Path | None) -> None:
        self.job = job
        self.path = path

    @property
    def name(self) -> str:
        return self.job.metadata.name

    def resolve(self, relative: str) -> Path:
        p = Path(relative)
        if p.is_absolute() or self.path is None:
            return p
        return self.path.parent / p

    @property
    def throughput_model_path(self) -> Path:
        return self.resolve(self.job.spec.throughput.model)

    def rescale_seconds(self) -> float:
        """``spec.rescale.duration``, or the measured median when it is ``auto``.

        The measurement is the ``kale.rescale/v1`` JSON written by ``kale profile``
        (``median_s``; older files may carry ``rescale_s``/``duration_s``/``total_s``).
        """
        rescale = self.job.spec.rescale
        if rescale.duration != "auto":
            return float(rescale.duration)
        if rescale.measurement is None:
            raise UserError(
                f"{self.path}: spec.rescale.measurement: is required when "
                "spec.rescale.duration is auto"
            )
        path = self.resolve(rescale.measurement)
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(
                f"{self.path}: spec.rescale.measurement: cannot read {path}: {exc}"
            ) from None
        for key in MEASUREMENT_KEYS:
            value = data.get(key) if isinstance(data, dict) else None
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                return float(value)
        raise UserError(
            f"{self.path}: spec.rescale.measurement: {path} has none of "
            f"{', '.join(MEASUREMENT_KEYS)}"
        )


def file_problems(job: ElasticTrainingJob, path: Path) -> list[Problem]:
    """Files the job refers to must exist (relative to the job file)."""
    out: list[Problem] = []
    loaded = LoadedJob(job, path)
    model = loaded.throughput_model_path
    if not model.is_file():
        out.append(("spec.throughput.model", f"file not found: {model}"))
    meas = job.spec.rescale.measurement
    if meas is not None and not loaded.resolve(meas).is_file():
        out.append(("spec.rescale.measurement", f"file not found: {loaded.resolve(meas)}"))
    if job.spec.rescale.duration == "auto" and meas is None:
        out.append(
            (
                "spec.rescale.measurement",
                "is required when spec.rescale.duration is auto "
                "(the JSON written by `kale profile`)",
            )
        )
    return out


def validate_file(
    path: str | Path, *, check_files: bool = True
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """Validate one job file.

    Returns (job or None, error lines, warning lines); lines read ``FILE: path: reason``.
    """
    p = Path(path)
    data, problems = read_yaml(p)
    job = None
    if not problems:
        job, problems = parse_job(data)
        if job is not None and check_files:
            problems += file_problems(job, p)
    errors = [_line(str(path), loc, msg) for loc, msg in problems]
    warnings = (
        []
        if job is None
        else [_line(str(path), loc, f"warning: {msg}") for loc, msg in advisories(job)]
    )
    return (LoadedJob(job, p) if job is not None and not errors else None), errors, warnings


def _line(file: str, loc: str, msg: str) -> str:
    if loc.startswith("("):
        return f"{file}: {msg}"
    return f"{file}: {loc}: {msg}"


def load_job(path: str | Path, *, check_files: bool = True) -> LoadedJob:
    """Load a valid job or raise :class:`UserError` with one line per problem."""
    job, errors, _ = validate_file(path, check_files=check_files)
    if job is None:
        raise UserError(errors[0], problems=errors)
    return job
