"""``controller.yaml``: how the controller runs (not what a job wants — that is the job file).

Parsed with pydantic like the job file: camelCase keys, unknown keys are errors, durations
as ``90s``/``5m``; every problem is reported as ``FILE: field.path: reason``. A missing file
is a hard error (never silently defaults), and relative paths resolve against the file.

Example (local mode over a directory of job files)::

    apiVersion: kale.dev/v1
    kind: ControllerConfig
    interval: 60s
    jobs:
      directory: .            # or:  namespaces: [ml]   (cluster mode, custom resources)
    quota:
      gpus: 64
    metrics:
      port: 9100
    stateDir: .kale-state
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.config import Duration, PositiveDuration, read_yaml
from autoscaler.errors import UserError

CONFIG_KIND = "ControllerConfig"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class JobsSource(_Model):
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


class Quota(_Model):
    gpus: int | None = Field(
        default=None, ge=0, description="GPUs shared by all jobs; absent means unlimited."
    )


class Metrics(_Model):
    port: int = Field(default=9100, ge=0, le=65535, description="0 disables the server.")
    address: str = Field(default="0.0.0.0", description="Address the /metrics server binds.")


class LeaderElection(_Model):
    enabled: bool = False
    namespace: str | None = Field(
        default=None,
        description="Namespace of the Lease (default: $POD_NAMESPACE, else kale-system).",
    )
    lease_name: str = "kale-controller"
    lease_duration: PositiveDuration = 15.0
    renew_deadline: PositiveDuration = 10.0
    retry_period: PositiveDuration = 2.0
    identity: str | None = Field(
        default=None, description="Defaults to $POD_NAME or hostname plus a random suffix."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "need leaderElection.retryPeriod < leaderElection.renewDeadline < "
                f"leaderElection.leaseDuration ({self.retry_period:g}s, "
                f"{self.renew_deadline:g}s, {self.lease_duration:g}s)"
            )
        return self


class Meter(_Model):
    window: PositiveDuration = Field(default=10.0, description="Rate window of the Kafka meter.")
    timeout: PositiveDuration = Field(default=10.0, description="Kafka request timeout.")
    threads: int = Field(default=4, ge=1, le=64, description="Jobs measured in parallel.")


class Forecasting(_Model):
    model: Literal["kale", "seasonal_naive", "ets", "stl_ets", "dlinear"] | None = Field(
        default=None, description="Use this model for every job instead of spec.forecast.model."
    )
    history: PositiveDuration = Field(
        default=28 * 86400.0, description="Arrival history given to the forecaster."
    )
    reforecast: Duration | None = Field(
        default=None, description="Reuse a forecast this long (default: a new one each tick)."
    )
    fit_threads: int = Field(
        default=1,
        ge=0,
        le=64,
        description="Threads that fit forecasters in the background "
        "while the loop goes on (0: fit inside the tick, which stops every job meanwhile).",
    )


class ControllerConfig(_Model):
    api_version: Literal["kale.dev/v1"] = "kale.dev/v1"
    kind: Literal["ControllerConfig"] = "ControllerConfig"
    interval: PositiveDuration = Field(default=60.0, description="Time between ticks.")
    jobs: JobsSource
    kubeconfig: str | None = Field(
        default=None,
        description="Kubeconfig file; absent: in-cluster service account, else ~/.kube/config.",
    )
    context: str | None = None
    quota: Quota = Quota()
    metrics: Metrics = Metrics()
    leader_election: LeaderElection = LeaderElection()
    meter: Meter = Meter()
    forecasting: Forecasting = Forecasting()
    state_dir: str = Field(
        default=".kale-state",
        description="Controller state and the meters' arrival history (SQLite).",
    )
    dry_run: bool = Field(default=False, description="Plan and log, change nothing.")
    log_format: Literal["json", "text"] = "json"

    @property
    def cluster_mode(self) -> bool:
        return self.jobs.namespaces is not None


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(root)"


def parse_controller_config(data: Any, *, source: str = "controller.yaml") -> ControllerConfig:
    """Validate a loaded document; raise :class:`UserError` with one line per problem."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping (a ControllerConfig)")
    try:
        return ControllerConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            msg = {"extra_forbidden": "unknown field", "missing": "required field is missing"}.get(
                err["type"], err["msg"]
            )
            msg = msg.removeprefix("Value error, ")
            lines.append(f"{source}: {_loc(err['loc'])}: {msg}")
        raise UserError(lines[0], problems=lines) from None


def _resolve(base: Path, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p))


def load_controller_config(path: str | Path) -> ControllerConfig:
    """Read ``controller.yaml``; relative paths in it become relative to the file."""
    p = Path(path)
    data, problems = read_yaml(p)
    if problems:
        lines = [
            f"{p}: {msg.replace('an ElasticTrainingJob', 'a ControllerConfig')}"
            for _, msg in problems
        ]
        raise UserError(lines[0], problems=lines)
    cfg = parse_controller_config(data, source=str(p))
    base = p.resolve().parent
    jobs = cfg.jobs.model_copy(
        update={
            "directory": _resolve(base, cfg.jobs.directory),
            "models_dir": _resolve(base, cfg.jobs.models_dir),
        }
    )
    return cfg.model_copy(
        update={
            "jobs": jobs,
            "kubeconfig": _resolve(base, cfg.kubeconfig),
            "state_dir": _resolve(base, cfg.state_dir),
        }
    )
