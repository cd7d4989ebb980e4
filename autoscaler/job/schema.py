"""The ElasticTrainingJob's schema: the pydantic models of what an ML engineer submits.

Why a module of its own: the schema is the contract shared by three readers — the job file
loader (:mod:`autoscaler.job.loading`), the generated CRD (:mod:`autoscaler.job.crd`) and
the controller's admission — so it stands alone, without the loading and error formatting.
Models use ``extra="forbid"`` (unknown fields are errors), camelCase on the wire, and are
frozen once loaded; relations between fields are checked by
:func:`autoscaler.job.rules.cross_check`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)
from pydantic.alias_generators import to_camel

from autoscaler.job.types import (
    DAY,
    AnnotationValue,
    Argument,
    ConsumerGroup,
    DnsLabel,
    DnsName,
    FilePath,
    GroupVersion,
    HostPort,
    KindName,
    LabelKey,
    LabelValue,
    ModelPath,
    NonNegativeInt,
    ObjectName,
    PositiveInt,
    Topic,
    _bounded,
    _pattern,
)

API_VERSION = "kale.dev/v1alpha1"
"""The version Kale writes and the API server serves and stores, the only one it serves
(docs/decisions/0142-one-served-api-version.md)."""
DEPRECATED_API_VERSIONS = ("kale.dev/v1",)
"""Still read from files (the same schema), with a warning; the CRD lists it unserved, so
objects a cluster stored as it stay readable but ``kubectl apply`` of a file written as it
is refused."""
KIND = "ElasticTrainingJob"
FORECAST_MODELS = ("kale", "seasonal_naive", "ets", "stl_ets", "dlinear")
TARGET_KINDS = ("StatefulSet", "TFJob", "Local", "DryRun", "PyTorchJob", "Scale")


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


class ScaleTargetRef(_Model):
    """An object with a ``scale`` subresource, named as the HPA's ``scaleTargetRef`` names
    it; Kale reads and writes its size through ``/scale`` only."""

    api_version: GroupVersion = Field(description="Its API group and version, e.g. apps/v1.")
    kind: KindName = Field(description="Its kind, e.g. Deployment.")
    name: ObjectName = Field(description="Its name, in the job's namespace.")


class Target(_Model):
    kind: Literal["StatefulSet", "TFJob", "Local", "DryRun", "PyTorchJob", "Scale"]
    workers: DnsName | None = Field(default=None, description="Worker StatefulSet name.")
    ps: DnsName | None = Field(default=None, description="PS StatefulSet name.")
    name: DnsName | None = Field(default=None, description="TFJob or PyTorchJob name.")
    scale_target_ref: ScaleTargetRef | None = Field(
        default=None,
        description="Scale: the workers' object, any kind with a scale subresource "
        "(Deployment, StatefulSet, a custom resource), as the HPA's scaleTargetRef.",
    )
    ps_ref: ScaleTargetRef | None = Field(
        default=None,
        description="Scale: the parameter servers' object, when they run apart (optional; "
        "without it the job has no PS).",
    )
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
