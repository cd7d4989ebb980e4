"""``controller.yaml``: how the controller runs (not what a job wants — that is the job file).

Parsed with pydantic like the job file (the sections are in
:mod:`autoscaler.controller.config_sections`): camelCase keys, unknown keys are errors, durations
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
from typing import Any, Literal

from pydantic import (
    Field,
    model_validator,
)

from autoscaler.controller.config_sections import (
    DAY,
    Forecasting,
    JobsSource,
    Meter,
    Metrics,
    Policy,
    Quota,
    Tick,
)
from autoscaler.job.admission import (
    CLUSTER_KAFKA_CIDRS,
    CLUSTER_KAFKA_HOSTS,
    CLUSTER_TARGET_KINDS,
    AdmissionPolicy,
    networks,
)
from autoscaler.job.rules import JobLimits
from autoscaler.job.schema import TARGET_KINDS
from common.durations import PositiveDuration
from common.errors import UserError
from common.settingsfile import SettingsModel, read_settings, resolve_path, validate_settings
from kube.leader import LeaderElection

CONFIG_KIND = "ControllerConfig"


class ControllerConfig(SettingsModel):
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
    shards: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Spread the jobs over this many shards, each with its own Lease "
        "(<leaderElection.leaseName>-<shard>): every replica plans the jobs of the shards it "
        "holds. 1: one Lease, one acting replica. More than 1 needs leaderElection.enabled.",
    )
    max_shards_per_replica: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="The most shards one replica takes (default: all of them). With R replicas, "
        "ceil(shards / R) spreads the jobs; a dead replica's shards go to replicas with room.",
    )
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
    def _shards_need_leases(self) -> ControllerConfig:
        if self.shards > 1 and not self.leader_election.enabled:
            raise ValueError(
                f"shards: {self.shards} needs leaderElection.enabled: true "
                "(each shard is owned through its own Lease)"
            )
        if self.max_shards_per_replica is not None and self.shards == 1:
            raise ValueError("maxShardsPerReplica needs shards greater than 1")
        return self

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


def parse_controller_config(data: Any, *, source: str = "controller.yaml") -> ControllerConfig:
    """Validate a loaded document; raise :class:`UserError` with one line per problem."""
    return validate_settings(ControllerConfig, data, source=source)


def load_controller_config(path: str | Path) -> ControllerConfig:
    """Read ``controller.yaml``; relative paths in it become relative to the file."""
    p = Path(path)
    cfg = read_settings(p, ControllerConfig)
    base = p.resolve().parent
    jobs = cfg.jobs.model_copy(
        update={
            "directory": resolve_path(base, cfg.jobs.directory),
            "models_dir": resolve_path(base, cfg.jobs.models_dir),
        }
    )
    policy = cfg.policy.model_copy(
        update={"models_root": resolve_path(base, cfg.policy.models_root)}
    )
    return cfg.model_copy(
        update={
            "jobs": jobs,
            "policy": policy,
            "kubeconfig": resolve_path(base, cfg.kubeconfig),
            "state_dir": resolve_path(base, cfg.state_dir),
            "secrets_dir": resolve_path(base, cfg.secrets_dir),
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
