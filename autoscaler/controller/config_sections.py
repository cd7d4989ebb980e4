"""The sections of ``controller.yaml``: jobs, quota, metrics, leader election, meter, forecasting,
tick and the admission policy, one pydantic model each.

Why a module of its own: every section is a small settings model with its defaults, bounds
and a description the docs are written from; :mod:`autoscaler.controller.config` assembles
them into :class:`~autoscaler.controller.config.ControllerConfig` and owns loading, paths
and flag overrides. The Lease settings live with the elector
(:class:`kube.leader.LeaderElection`): the scheduler's config uses them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from autoscaler.job.admission import (
    CLUSTER_KAFKA_CIDRS,
    CLUSTER_KAFKA_HOSTS,
    CLUSTER_TARGET_KINDS,
    networks,
)
from autoscaler.job.rules import DEFAULT_LIMITS
from common.durations import Duration, PositiveDuration
from common.settingsfile import SettingsModel

if TYPE_CHECKING:  # a runtime import would load the Kubernetes client with the settings
    pass

HOUR, DAY = 3600.0, 86400.0


class JobsSource(SettingsModel):
    """Where jobs come from: exactly one of ``directory`` and ``namespaces``."""

    directory: str | None = Field(
        default=None, description="Local mode: a directory of ElasticTrainingJob YAML files."
    )
    namespaces: list[str] | None = Field(
        default=None,
        description="Cluster mode: namespaces to read elastictrainingjobs.kale.dev "
        "from; an empty list means all namespaces.",
    )
    models_dir: str | None = Field(
        default=None,
        description="Cluster mode: where relative spec.throughput.model paths "
        "resolve (a mounted ConfigMap).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> JobsSource:
        if (self.directory is None) == (self.namespaces is None):
            raise ValueError(
                "set exactly one of jobs.directory (local mode) and jobs.namespaces (cluster mode)"
            )
        return self


class Quota(SettingsModel):
    gpus: int | None = Field(
        default=None, ge=0, description="GPUs shared by all jobs; absent means unlimited."
    )


class Metrics(SettingsModel):
    port: int = Field(default=9100, ge=0, le=65535, description="0 disables the server.")
    address: str = Field(default="0.0.0.0", description="Address the /metrics server binds.")


class Meter(SettingsModel):
    window: PositiveDuration = Field(
        default=10.0, le=HOUR, description="Rate window of the Kafka meter."
    )
    timeout: PositiveDuration = Field(default=10.0, le=HOUR, description="Kafka request timeout.")
    threads: int = Field(default=4, ge=1, le=64, description="Jobs measured in parallel.")


class Forecasting(SettingsModel):
    model: Literal["kale", "seasonal_naive", "ets", "stl_ets", "dlinear"] | None = Field(
        default=None, description="Use this model for every job instead of spec.forecast.model."
    )
    history: PositiveDuration = Field(
        default=28 * 86400.0, le=400 * DAY, description="Arrival history given to the forecaster."
    )
    reforecast: Duration | None = Field(
        default=None,
        le=DAY,
        description="Reuse a forecast this long (default: a new one each tick).",
    )
    fit_threads: int = Field(
        default=1,
        ge=0,
        le=64,
        description="Threads that fit forecasters in the background "
        "while the loop goes on (0: fit inside the tick, which stops every job meanwhile).",
    )


class Tick(SettingsModel):
    """How a tick bounds its slow work: how long it waits, on how many threads.

    A tick must end well inside its interval whatever one job's broker or API server does,
    so every wait has a deadline; work still running at a deadline goes on in the
    background and its job holds meanwhile (docs/controller.md, "Deadlines").
    """

    observe_deadline: PositiveDuration | None = Field(
        default=None,
        le=HOUR,
        description="Longest a tick waits for measurements and target reads "
        "(default: min(max(2 x meter.timeout, 5s), interval / 3)).",
    )
    write_deadline: PositiveDuration | None = Field(
        default=None,
        le=HOUR,
        description="Longest a tick waits for resize and status writes (default: interval / 3).",
    )
    write_threads: int = Field(
        default=8,
        ge=2,
        le=64,
        description="Resize and status writes of different jobs run on this many threads "
        "at once (at least 2: one thread would write inline, without the deadline).",
    )
    backfill_threads: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Backfills (a new topic's history read back from the broker) run on "
        "this many background threads.",
    )


TargetKind = Literal["StatefulSet", "TFJob", "Local", "DryRun", "PyTorchJob", "Scale"]
HostPattern = Annotated[
    str, Field(strict=True, pattern=r"^[A-Za-z0-9*?._-]{1,253}$", description="e.g. *.svc")
]


class KafkaPolicy(SettingsModel):
    allowed_hosts: list[HostPattern] | None = Field(
        default=None,
        max_length=256,
        description="Broker host patterns jobs may name (fnmatch). Default: any host in "
        f"local mode; {', '.join(CLUSTER_KAFKA_HOSTS)} in cluster mode.",
    )
    allowed_cidrs: list[Annotated[str, Field(strict=True, max_length=64)]] | None = Field(
        default=None,
        max_length=256,
        description="Networks brokers given as IP addresses may be in. Default: any in local "
        f"mode; {', '.join(CLUSTER_KAFKA_CIDRS)} in cluster mode (never loopback or "
        "link-local such as 169.254.169.254 unless listed here).",
    )

    @field_validator("allowed_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or []:
            try:
                networks([cidr])
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a network such as 10.0.0.0/8 ({exc})") from None
        return value


class Limits(SettingsModel):
    min_forecast_interval: PositiveDuration = Field(
        default=DEFAULT_LIMITS.min_forecast_interval_s,
        le=86400.0,
        description="Floor of spec.forecast.interval (each step is a row of history per job).",
    )


class Policy(SettingsModel):
    """What a job may ask for (see :mod:`autoscaler.job.admission`)."""

    allowed_target_kinds: list[TargetKind] | None = Field(
        default=None,
        description="spec.target.kind values allowed. Default: all in local mode; "
        f"{', '.join(CLUSTER_TARGET_KINDS)} in cluster mode (Local runs the job's command "
        "inside the controller pod).",
    )
    kafka: KafkaPolicy = KafkaPolicy()
    models_root: str | None = Field(
        default=None,
        description="Model and measurement files must be inside this directory. Default: "
        "none in local mode; jobs.modelsDir in cluster mode.",
    )
    limits: Limits = Limits()
