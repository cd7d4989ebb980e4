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

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from autoscaler.errors import UserError
from autoscaler.jobfiles import file_problems, read_json_file
from autoscaler.jobrules import (
    DEFAULT_LIMITS,
    JobLimits,
    Problem,
    advisories,
    cross_check,
    limit_problems,
)
from autoscaler.jobtypes import (
    DAY,
    AnnotationValue,
    Argument,
    ConsumerGroup,
    DnsLabel,
    DnsName,
    Duration,
    FilePath,
    HostPort,
    LabelKey,
    LabelValue,
    ModelPath,
    NonNegativeInt,
    PositiveDuration,
    PositiveInt,
    Topic,
    _bounded,
    _kind,
    _pattern,
)
from autoscaler.overrides import problems as override_problems
from autoscaler.yamldoc import DEFAULT_LIMITS as DOCUMENT_LIMITS
from autoscaler.yamldoc import DocumentLimits, load_file

__all__ = [
    "Duration",
    "ElasticTrainingJob",
    "JobLimits",
    "LoadedJob",
    "PositiveDuration",
    "Problem",
    "advisories",
    "cross_check",
    "file_problems",
    "load_job",
    "parse_job",
    "read_yaml",
    "validate_file",
]

API_VERSION = "kale.dev/v1alpha1"
"""The version Kale writes and the API server stores (docs/decisions/0130-api-version.md)."""
DEPRECATED_API_VERSIONS = ("kale.dev/v1",)
"""Still read (the same schema; the CRD serves it, deprecated), with a warning."""
KIND = "ElasticTrainingJob"
FORECAST_MODELS = ("kale", "seasonal_naive", "ets", "stl_ets", "dlinear")
TARGET_KINDS = ("StatefulSet", "TFJob", "Local", "DryRun")
# Keys of the rescale measurement JSON, in order of preference (kale.rescale/v1 writes median_s).
MEASUREMENT_KEYS = ("median_s", "rescale_s", "duration_s", "total_s")


class _Model(BaseModel):
    """Base: camelCase on the wire, unknown fields are errors, immutable once loaded."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,
    )


class Metadata(_Model):
    name: DnsLabel = Field(description="Job name (a DNS-1123 label).")
    namespace: DnsLabel = Field(default="default", description="Kubernetes namespace.")
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=256)
    annotations: dict[LabelKey, AnnotationValue] = Field(default_factory=dict, max_length=256)


SecretName: Any = _pattern(  # a type (Annotated), built at run time
    r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?",
    "a Secret name (a DNS-1123 subdomain)",
    max_length=253,
)
SecretKey: Any = _pattern(r"[-._a-zA-Z0-9]{1,253}", "a Secret key", max_length=253)


class TlsSecretRef(_Model):
    name: SecretName = Field(description="A Secret in the job's namespace.")
    ca_key: SecretKey = Field(default="ca.crt", description="Key of the CA bundle (PEM).")
    cert_key: SecretKey | None = Field(
        default=None, description="Key of the client certificate (PEM), for mutual TLS."
    )
    key_key: SecretKey | None = Field(
        default=None, description="Key of the client certificate's private key (PEM)."
    )


class KafkaTls(_Model):
    secret_ref: TlsSecretRef | None = Field(
        default=None, description="CA and client certificate; absent: the system's CAs."
    )
    check_hostname: bool = Field(
        default=True, description="Verify that each broker's certificate names its host."
    )


class SaslSecretRef(_Model):
    name: SecretName = Field(description="A Secret in the job's namespace.")
    username_key: SecretKey = Field(default="username", description="Key of the user name.")
    password_key: SecretKey = Field(default="password", description="Key of the password.")


class KafkaSasl(_Model):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        description="SASL mechanism the brokers accept."
    )
    secret_ref: SaslSecretRef = Field(description="Where the user name and password are.")


class KafkaSource(_Model):
    bootstrap_servers: list[HostPort] = Field(
        min_length=1, max_length=32, description="host:port of the brokers."
    )
    topic: Topic = Field(description="Topic the training samples arrive on.")
    consumer_group: ConsumerGroup = Field(description="Consumer group of the trainer.")
    tls: KafkaTls | None = Field(
        default=None, description="Encrypt the connections (SSL / SASL_SSL)."
    )
    sasl: KafkaSasl | None = Field(default=None, description="Authenticate with SASL.")


class Source(_Model):
    kafka: KafkaSource


MAX_WORKERS = 10_000
"""Workers of one job: beyond any cluster Kale sizes, far below where sizing arithmetic or the
throughput solver's search would hurt."""


class Training(_Model):
    mode: Literal["sync", "async"] = Field(description="Synchronous or asynchronous PS training.")
    global_batch_size: PositiveInt = Field(
        le=2**31 - 1, description="Global batch M, constant while scaling."
    )
    workers_per_ps: PositiveInt = Field(
        le=1000, alias="workersPerPS", description="w/p ratio kept while scaling."
    )
    min_workers: PositiveInt = Field(
        default=1, le=MAX_WORKERS, description="Guaranteed minimum workers."
    )
    max_workers: PositiveInt = Field(le=MAX_WORKERS, description="Upper bound on workers.")
    gpus_per_worker: NonNegativeInt = Field(
        default=1, le=64, description="GPUs each worker pod holds."
    )


class Slo(_Model):
    max_delay: _bounded(gt=0, le=7 * DAY) = Field(  # type: ignore[valid-type]
        description="Max age of the oldest unconsumed sample (at most 7 days)."
    )


class Rescale(_Model):
    duration: Literal["auto"] | _bounded(gt=0, le=DAY) = Field(  # type: ignore[valid-type]
        description="Downtime of one resize (at most 1 day), or 'auto' to use the measured value."
    )
    measurement: FilePath | None = Field(
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


ConfigMapName: Any = _pattern(  # a type (Annotated), built at run time
    r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?",
    "a ConfigMap name (a DNS-1123 subdomain)",
    max_length=253,
)
ConfigMapKey: Any = _pattern(r"[-._a-zA-Z0-9]{1,253}", "a ConfigMap key", max_length=253)


class ConfigMapKeyRef(_Model):
    name: ConfigMapName = Field(description="A ConfigMap in the job's own namespace.")
    key: ConfigMapKey = Field(default="model.json", description="The key holding the model JSON.")


class InlineThroughput(_Model):
    """The fitted coefficients themselves: the job needs no file and no ConfigMap."""

    family: Literal["general", "fixed-ratio", "linear", "optimus"] = Field(
        description="Throughput family (docs/throughput.md)."
    )
    mode: Literal["sync", "async"] = Field(description="Training mode the model was fitted for.")
    theta: list[Annotated[float, Field(ge=0)]] = Field(
        min_length=1, max_length=6, description="Non-negative coefficients θ0, θ1, …"
    )
    global_batch: float = Field(
        gt=0, le=2**31 - 1, description="Global batch M the model was fitted with."
    )
    ratio: PositiveInt | None = Field(
        default=None, le=1000, description="w/p of the fit; default spec.training.workersPerPS."
    )

    def as_model_dict(self, workers_per_ps: int) -> dict[str, Any]:
        """The ``kale.throughput/v1`` JSON these coefficients stand for."""
        return {
            "format": "kale.throughput/v1",
            "family": self.family,
            "mode": self.mode,
            "theta": list(self.theta),
            "global_batch": self.global_batch,
            "ratio": self.ratio or workers_per_ps,
        }


class ThroughputRef(_Model):
    """Exactly one of: a model file, a ConfigMap in the job's namespace, the coefficients."""

    model: ModelPath | None = Field(
        default=None,
        description="Throughput model JSON file (from `kale throughput fit`); in cluster mode "
        "relative to the controller's models directory.",
    )
    config_map_ref: ConfigMapKeyRef | None = Field(
        default=None,
        description="A ConfigMap in the job's namespace holding the model JSON (cluster mode).",
    )
    inline: InlineThroughput | None = Field(
        default=None, description="The model's coefficients, inline."
    )


MIN_INTERVAL_S = 0.1
"""The hard floor of ``spec.forecast.interval`` (the platform's policy sets the real one, 10 s
by default; only a time-compressed demo goes below it)."""


class Forecast(_Model):
    model: Literal["kale", "seasonal_naive", "ets", "stl_ets", "dlinear"] = "kale"
    interval: _bounded(ge=MIN_INTERVAL_S, le=DAY) = Field(  # type: ignore[valid-type]
        default=60.0, description="Step of the arrival history (10 s to 1 day)."
    )
    horizon: _bounded(gt=0, le=7 * DAY) = Field(  # type: ignore[valid-type]
        default=3600.0, description="How far ahead to forecast (at most 7 days)."
    )
    refit: _bounded(gt=0, le=30 * DAY) = Field(  # type: ignore[valid-type]
        default=86400.0, description="How often to refit (at most 30 days)."
    )
    quantile: float = Field(default=0.9, gt=0.5, lt=1.0, description="Upper quantile planned for.")


class Target(_Model):
    kind: Literal["StatefulSet", "TFJob", "Local", "DryRun"]
    workers: DnsName | None = Field(default=None, description="Worker StatefulSet name.")
    ps: DnsName | None = Field(default=None, description="PS StatefulSet name.")
    name: DnsName | None = Field(default=None, description="TFJob name.")
    command: list[Argument] | None = Field(
        default=None, max_length=64, description="Local worker command."
    )
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
    priority: int = Field(
        default=0,
        strict=True,
        ge=-1_000_000_000,
        le=1_000_000_000,
        description="Higher wins when GPUs are short.",
    )
    replicas: int | None = Field(
        default=None,
        strict=True,
        ge=0,
        le=MAX_WORKERS,
        description="Pinned worker count, written by `kubectl scale etj` (the scale "
        "subresource): Kale holds the job there (within minWorkers..maxWorkers) instead of "
        "planning, until the field is removed. Leave it out of manifests.",
    )


class ElasticTrainingJob(_Model):
    api_version: Literal["kale.dev/v1alpha1", "kale.dev/v1"]
    kind: Literal["ElasticTrainingJob"]
    metadata: Metadata
    spec: Spec


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) if loc else "(root)"


_TYPE_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _format_error(err: ErrorDetails) -> Problem:
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
            msg = f"{msg}, got {_brief(given)}"
    return _format_loc(loc), msg


def shape_problem(data: Any, limits: DocumentLimits = DOCUMENT_LIMITS) -> Problem | None:
    """Depth and size of an already-loaded document (a custom resource from the API server
    did not pass through :mod:`autoscaler.yamldoc`), checked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            return "(root)", f"more than {limits.max_nodes} values; a job has about 60"
        if isinstance(node, dict | list):
            if depth > limits.max_depth:
                return "(root)", f"nesting deeper than {limits.max_depth} levels (a job needs 5)"
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, str) and len(node) > limits.max_scalar_chars:
            return "(root)", f"a value of {len(node)} characters"
    return None


def parse_job(data: Any) -> tuple[ElasticTrainingJob | None, list[Problem]]:
    """Validate a loaded YAML document; return the job (or None) and every problem found.

    Only what holds for every job is checked here; the platform's tunable bounds
    (:func:`autoscaler.jobrules.limit_problems`) and the referenced files are checked by
    :func:`validate_file` and the controller's admission.
    """
    if not isinstance(data, dict):
        return None, [
            ("(root)", f"expected a mapping (an ElasticTrainingJob), got a {_kind(data)}")
        ]
    shape = shape_problem(data)
    if shape is not None:
        return None, [shape]
    try:
        job = ElasticTrainingJob.model_validate(data)
    except ValidationError as exc:
        problems = [_format_error(e) for e in exc.errors()]
        return None, _dedupe(problems)
    return job, cross_check(job) + override_problems(job.metadata.annotations)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    """One line per field: unions report each branch's failure, the first one says enough."""
    seen: dict[str, str] = {}
    for path, msg in problems:
        seen.setdefault(path, msg)
    return list(seen.items())


def read_yaml(path: Path, *, kind: str = "an ElasticTrainingJob") -> tuple[Any, list[Problem]]:
    """Read one YAML document within :data:`DOCUMENT_LIMITS`.

    File problems come back as ``(file)``/``(yaml)`` problems, or ``(line N)`` when a line is
    known (printed ``FILE:N: reason``).
    """
    if not path.exists():
        return None, [("(file)", "file not found")]
    if path.is_dir():
        return None, [("(file)", "is a directory, expected a YAML file")]
    docs, problem = load_file(path)
    if problem is not None:
        where = f"(line {problem.line})" if problem.line is not None else "(yaml)"
        return None, [(where, problem.message)]
    if not docs:
        try:
            empty = path.stat().st_size == 0 or not path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            empty = False
        if empty:
            return None, [("(file)", f"empty file, expected {kind}")]
        return None, [("(file)", "contains no YAML document")]
    if len(docs) > 1:
        return None, [
            (
                "(file)",
                f"contains {len(docs)} YAML documents; put one {kind.split()[-1]} in each file",
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
        """The model file (a job whose model is inline or in a ConfigMap has none)."""
        model = self.job.spec.throughput.model
        if model is None:
            raise UserError(
                f"{self.path or self.name}: spec.throughput: the model is "
                f"{'inline' if self.job.spec.throughput.inline else 'in a ConfigMap'}, "
                "not a file"
            )
        return self.resolve(model)

    def throughput_model(self, config_map_data: Any = None) -> Any:
        """The job's :class:`throughput.model.ThroughputModel`, from whichever source the
        spec names (``config_map_data``: the JSON read from the ConfigMap, cluster mode)."""
        from throughput.errors import ThroughputError
        from throughput.model import ThroughputModel

        ref = self.job.spec.throughput
        where = f"{self.path or self.name}: spec.throughput"
        try:
            if ref.inline is not None:
                data = ref.inline.as_model_dict(self.job.spec.training.workers_per_ps)
                return ThroughputModel.from_dict(data, source=f"{where}.inline")
            if ref.config_map_ref is not None:
                if config_map_data is None:
                    raise UserError(
                        f"{where}.configMapRef: the model is read from a ConfigMap in the "
                        "job's namespace, which only the controller in cluster mode can read; "
                        "here use spec.throughput.model (a file) or spec.throughput.inline"
                    )
                cm = ref.config_map_ref
                return ThroughputModel.from_dict(
                    config_map_data, source=f"ConfigMap {cm.name} key {cm.key}"
                )
            return ThroughputModel.load(self.throughput_model_path)
        except (ThroughputError, OSError, ValueError) as exc:
            raise UserError(f"{where}: {exc}") from None

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
        data, why = read_json_file(path)
        if why is not None:
            raise UserError(f"{self.path}: spec.rescale.measurement: {why}")
        for key in MEASUREMENT_KEYS:
            value = data.get(key) if isinstance(data, dict) else None
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 < value <= DAY  # json.loads reads Infinity and 1e400 as inf
            ):
                return float(value)
        raise UserError(
            f"{self.path}: spec.rescale.measurement: {path} has none of "
            f"{', '.join(MEASUREMENT_KEYS)} (a number of seconds in (0, 1 day])"
        )


def validate_file(
    path: str | Path,
    *,
    check_files: bool = True,
    limits: JobLimits = DEFAULT_LIMITS,
    models_root: Path | None = None,
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """Validate one job file against ``limits`` (and, with ``check_files``, the files it names,
    inside ``models_root`` when one is given).

    Returns (job or None, error lines, warning lines); lines read ``FILE: path: reason``.
    """
    p = Path(path)
    data, problems = read_yaml(p)
    job = None
    if not problems:
        job, problems = parse_job(data)
        if job is not None:
            problems += limit_problems(job, limits)
            if check_files:
                problems += file_problems(LoadedJob(job, p), root=models_root)
    errors = [_line(str(path), loc, msg) for loc, msg in problems]
    warnings = (
        []
        if job is None
        else [_line(str(path), loc, f"warning: {msg}") for loc, msg in advisories(job)]
    )
    if job is not None and job.api_version in DEPRECATED_API_VERSIONS:
        warnings.append(
            _line(
                str(path),
                "apiVersion",
                f"warning: {job.api_version} is deprecated; write {API_VERSION} (the same schema)",
            )
        )
    return (LoadedJob(job, p) if job is not None and not errors else None), errors, warnings


def _line(file: str, loc: str, msg: str) -> str:
    if loc.startswith("(line "):
        return f"{file}:{loc[6:-1]}: {msg}"
    if loc.startswith("("):
        return f"{file}: {msg}"
    return f"{file}: {loc}: {msg}"


def load_job(path: str | Path, *, check_files: bool = True) -> LoadedJob:
    """Load a valid job or raise :class:`UserError` with one line per problem."""
    job, errors, _ = validate_file(path, check_files=check_files)
    if job is None:
        raise UserError(errors[0], problems=errors)
    return job
