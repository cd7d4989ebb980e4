"""``controller.yaml``: how the controller runs (not what a job wants — that is the job file).

Parsed with pydantic like the job file: camelCase keys, unknown keys are errors, durations
as ``90s``/``5m``; every problem is reported as ``FILE: field.path: reason``. A missing file
is a hard error (never silently defaults), and relative paths resolve against the file.

Example (local mode over a directory of job files)::

    apiVersion: kale.dev/v1alpha1
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

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from autoscaler.config import TARGET_KINDS, Duration, PositiveDuration, read_yaml
from autoscaler.controller.admission import (
    CLUSTER_KAFKA_CIDRS,
    CLUSTER_KAFKA_HOSTS,
    CLUSTER_TARGET_KINDS,
    AdmissionPolicy,
    networks,
)
from autoscaler.errors import UserError
from autoscaler.jobrules import DEFAULT_LIMITS, JobLimits

CONFIG_KIND = "ControllerConfig"
HOUR, DAY = 3600.0, 86400.0


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
    lease_duration: PositiveDuration = Field(default=15.0, le=HOUR)
    renew_deadline: PositiveDuration = Field(default=10.0, le=HOUR)
    retry_period: PositiveDuration = Field(default=2.0, le=HOUR)
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
    window: PositiveDuration = Field(
        default=10.0, le=HOUR, description="Rate window of the Kafka meter."
    )
    timeout: PositiveDuration = Field(default=10.0, le=HOUR, description="Kafka request timeout.")
    threads: int = Field(default=4, ge=1, le=64, description="Jobs measured in parallel.")


class Forecasting(_Model):
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


class Tick(_Model):
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


TargetKind = Literal["StatefulSet", "TFJob", "Local", "DryRun"]
HostPattern = Annotated[
    str, Field(strict=True, pattern=r"^[A-Za-z0-9*?._-]{1,253}$", description="e.g. *.svc")
]


class KafkaPolicy(_Model):
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


class Limits(_Model):
    min_forecast_interval: PositiveDuration = Field(
        default=DEFAULT_LIMITS.min_forecast_interval_s,
        le=86400.0,
        description="Floor of spec.forecast.interval (each step is a row of history per job).",
    )


class Policy(_Model):
    """What a job may ask for (see :mod:`autoscaler.controller.admission`)."""

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


class ControllerConfig(_Model):
    api_version: Literal["kale.dev/v1alpha1", "kale.dev/v1"] = "kale.dev/v1alpha1"
    kind: Literal["ControllerConfig"] = "ControllerConfig"
    interval: PositiveDuration = Field(
        default=60.0, le=DAY, description="Time between ticks (at most 1 day)."
    )
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
    tick: Tick = Tick()
    state_dir: str = Field(
        default=".kale-state",
        description="Controller state and the meters' arrival history (SQLite).",
    )
    secrets_dir: str | None = Field(
        default=None,
        description="Local mode: Secrets the jobs name (Kafka SASL/TLS) are read from "
        "<secretsDir>/<name>/<key> or KALE_SECRET_<NAME>_<KEY> (default $KALE_SECRETS_DIR, "
        "else /etc/kale/secrets). Cluster mode reads them from the job's namespace.",
    )
    dry_run: bool = Field(default=False, description="Plan and log, change nothing.")
    log_format: Literal["json", "text"] = "json"
    policy: Policy = Policy()

    @property
    def cluster_mode(self) -> bool:
        return self.jobs.namespaces is not None

    @property
    def observe_deadline(self) -> float:
        """``tick.observeDeadline``, else a few Kafka request timeouts, at most a third of a
        tick (a measurement takes a request or two; a stuck broker must not take the tick)."""
        if self.tick.observe_deadline is not None:
            return self.tick.observe_deadline
        return min(max(2 * self.meter.timeout, 5.0), self.interval / 3)

    @property
    def write_deadline(self) -> float:
        """``tick.writeDeadline``, else a third of a tick."""
        if self.tick.write_deadline is not None:
            return self.tick.write_deadline
        return self.interval / 3

    @model_validator(mode="after")
    def _tick_fits_its_interval(self) -> ControllerConfig:
        observe, write = self.observe_deadline, self.write_deadline
        if observe + write >= self.interval:
            raise ValueError(
                f"tick.observeDeadline ({observe:g}s) + tick.writeDeadline ({write:g}s) must be "
                f"less than interval ({self.interval:g}s): a tick waits for both in turn"
            )
        return self

    def admission_policy(self) -> AdmissionPolicy:
        """The policy jobs are admitted by: the mode's defaults, overridden by ``policy:``."""
        pol, cluster = self.policy, self.cluster_mode
        kinds: Sequence[str] | None = pol.allowed_target_kinds
        if kinds is None:
            kinds = CLUSTER_TARGET_KINDS if cluster else TARGET_KINDS
        hosts = pol.kafka.allowed_hosts
        cidrs = pol.kafka.allowed_cidrs
        if cluster and hosts is None and cidrs is None:
            hosts, cidrs = list(CLUSTER_KAFKA_HOSTS), list(CLUSTER_KAFKA_CIDRS)
        root = pol.models_root
        if root is None and cluster:
            root = self.jobs.models_dir or "."
        return AdmissionPolicy(
            target_kinds=frozenset(kinds),
            kafka_hosts=None if hosts is None else tuple(hosts),
            kafka_cidrs=networks(cidrs or []),
            models_root=None if root is None else Path(root),
            limits=JobLimits(min_forecast_interval_s=pol.limits.min_forecast_interval),
        )


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
    data, problems = read_yaml(p, kind="a ControllerConfig")
    if problems:
        lines = [
            f"{p}:{loc[6:-1]}: {msg}" if loc.startswith("(line ") else f"{p}: {msg}"
            for loc, msg in problems
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
    policy = cfg.policy.model_copy(update={"models_root": _resolve(base, cfg.policy.models_root)})
    return cfg.model_copy(
        update={
            "jobs": jobs,
            "policy": policy,
            "kubeconfig": _resolve(base, cfg.kubeconfig),
            "state_dir": _resolve(base, cfg.state_dir),
            "secrets_dir": _resolve(base, cfg.secrets_dir),
        }
    )


def with_overrides(
    cfg: ControllerConfig,
    *,
    watch_namespaces: list[str] | None = None,
    leader_election: bool | None = None,
) -> ControllerConfig:
    """The configuration with the command line's overrides (``--watch-namespace``,
    ``--leader-election``): what a kustomize component changes by appending an argument,
    so components compose without each carrying a copy of ``controller.yaml``."""
    update: dict[str, Any] = {}
    if watch_namespaces:
        if not cfg.cluster_mode:
            raise UserError(
                "--watch-namespace: the configuration is in local mode (jobs.directory); "
                "namespaces are for cluster mode (jobs.namespaces)"
            )
        update["jobs"] = cfg.jobs.model_copy(update={"namespaces": list(watch_namespaces)})
    if leader_election is not None:
        update["leader_election"] = cfg.leader_election.model_copy(
            update={"enabled": leader_election}
        )
    return cfg.model_copy(update=update) if update else cfg
