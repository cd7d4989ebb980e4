"""``scheduler.yaml``: how ``kale scheduler`` runs (parsed like ``controller.yaml``).

camelCase keys, unknown keys are errors, durations as ``90s``/``24h``; every problem is one
line ``FILE: field.path: reason``; a missing file is an error; relative paths resolve
against the file. Example::

    apiVersion: kale.dev/v1alpha1
    kind: SchedulerConfig
    schedulerName: kale          # pods with spec.schedulerName: kale are ours
    policy: fgd                  # first-fit, a placement/ policy, agent:PATH[,fallback=RULE]
    workload: typical-pods.csv   # FGD's typical pods (default: the pods it has seen)
    faults:
      window: 24h
    namespaces: [ml]             # place pods of these namespaces only (default: all)
    leaderElection:
      enabled: true
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from common.durations import PositiveDuration
from common.settingsfile import SettingsModel, read_settings, resolve_path, validate_settings
from kube.leader import LeaderElection
from placement.agent_names import is_agent, parse_agent_name
from placement.errors import PlacementError
from scheduler.objects import Conventions

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


# The names' defaults are the scheduler's own (:class:`Conventions`), written once there.
_DEFAULT = Conventions()


class Names(SettingsModel):
    """The resource, label and annotation names (defaults: see docs/scheduler.md)."""

    gpu_resource: str = _DEFAULT.gpu_resource
    gpu_model_label: str = _DEFAULT.gpu_model_label
    gpu_milli_annotation: str = _DEFAULT.gpu_milli_annotation
    gpu_count_annotation: str = _DEFAULT.gpu_count_annotation
    gpu_model_annotation: str = _DEFAULT.gpu_model_annotation
    assigned_gpus_annotation: str = _DEFAULT.assigned_gpus_annotation
    gpu_assignment_annotation: str = _DEFAULT.gpu_assignment_annotation
    gang_label: str = _DEFAULT.gang_label
    gang_size_annotation: str = _DEFAULT.gang_size_annotation


class Faults(SettingsModel):
    window: PositiveDuration = Field(default=86_400.0, description="How far back faults count.")
    annotation: str = _DEFAULT.faults_annotation
    conditions: list[str] = Field(
        default_factory=lambda: list(_DEFAULT.fault_conditions),
        description="Node condition types that count as a fault while True.",
    )
    events: bool = Field(
        default=True, description="Watch Events on Nodes (Xid-style, node-problem-detector)."
    )
    event_reasons: list[str] = Field(
        default_factory=lambda: list(_DEFAULT.fault_event_reasons),
        description="Reasons of Node Events that count as a GPU fault.",
    )
    gpu_annotation: str = Field(
        default=_DEFAULT.fault_gpu_annotation,
        description="On a fault Event: the GPU index it concerns.",
    )


class Backoff(SettingsModel):
    initial: PositiveDuration = 1.0
    max: PositiveDuration = 10.0
    flush: PositiveDuration = Field(
        default=60.0, description="Retry unschedulable pods at least this often."
    )


class Events(SettingsModel):
    scheduled: bool = Field(default=True, description="A Scheduled Event per binding.")
    repeat: PositiveDuration = Field(
        default=60.0, description="Repeat an unchanged FailedScheduling Event at most this often."
    )


class Preemption(SettingsModel):
    enabled: bool = Field(
        default=True,
        description="Evict lower-priority pods (Eviction API) for a pod that fits nowhere.",
    )


class Metrics(SettingsModel):
    port: int = Field(default=9101, ge=0, le=65535, description="0 disables the server.")
    address: str = "0.0.0.0"


class SchedulerLeaderElection(LeaderElection):
    lease_name: str = "kale-scheduler"


class SchedulerConfig(SettingsModel):
    api_version: Literal["kale.dev/v1alpha1", "kale.dev/v1"] = "kale.dev/v1alpha1"
    kind: Literal["SchedulerConfig"] = "SchedulerConfig"
    scheduler_name: str = Field(default=_DEFAULT.scheduler_name, pattern=DNS_LABEL)
    policy: str = Field(default="fgd", min_length=1)
    seed: int = Field(default=0, ge=0, description="Tie-break order of the policies.")
    workload: str | None = Field(
        default=None, description="Pod list (CSV) whose typical pods FGD plans for."
    )
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = Field(
        default_factory=list,
        description="Place pods of these namespaces only (bound pods of every namespace are "
        "still accounted); empty: every namespace.",
    )
    names: Names = Names()
    faults: Faults = Faults()
    backoff: Backoff = Backoff()
    events: Events = Events()
    preemption: Preemption = Preemption()
    metrics: Metrics = Metrics()
    leader_election: SchedulerLeaderElection = SchedulerLeaderElection()
    watch_timeout: PositiveDuration = Field(
        default=300.0, description="Longest single watch request before it is renewed."
    )
    log_format: Literal["json", "text"] = "json"

    @field_validator("namespaces")
    @classmethod
    def _namespace_names(cls, value: list[str]) -> list[str]:
        return check_namespaces(value)

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from scheduler.adapter import check_policy_name

        check_policy_name(value)  # ValueError names the known policies
        return value

    def conventions(self) -> Conventions:
        n = self.names
        return Conventions(
            scheduler_name=self.scheduler_name,
            gpu_resource=n.gpu_resource,
            gpu_model_label=n.gpu_model_label,
            gpu_milli_annotation=n.gpu_milli_annotation,
            gpu_count_annotation=n.gpu_count_annotation,
            gpu_model_annotation=n.gpu_model_annotation,
            assigned_gpus_annotation=n.assigned_gpus_annotation,
            gpu_assignment_annotation=n.gpu_assignment_annotation,
            gang_label=n.gang_label,
            gang_size_annotation=n.gang_size_annotation,
            faults_annotation=self.faults.annotation,
            fault_conditions=tuple(self.faults.conditions),
            fault_event_reasons=tuple(self.faults.event_reasons),
            fault_gpu_annotation=self.faults.gpu_annotation,
        )


def check_namespaces(names: list[str]) -> list[str]:
    """``names``, or ValueError naming one that cannot name a namespace (a DNS-1123 label)
    or one listed twice."""
    for name in names:
        if not re.fullmatch(DNS_LABEL, name) or len(name) > 63:
            raise ValueError(f"{name!r} is not a namespace name (a DNS-1123 label)")
    if len(set(names)) != len(names):
        raise ValueError("a namespace is listed twice")
    return names


def with_namespaces(cfg: SchedulerConfig, namespaces: list[str]) -> SchedulerConfig:
    """The configuration with ``--namespace`` values (they replace ``namespaces:``, as the
    controller's ``--watch-namespace`` replaces ``jobs.namespaces``)."""
    if not namespaces:
        return cfg
    from common.errors import UserError

    try:
        checked = check_namespaces(list(namespaces))
    except ValueError as exc:
        raise UserError(f"--namespace: {exc}") from None
    return cfg.model_copy(update={"namespaces": checked})


def parse_scheduler_config(data: Any, *, source: str = "scheduler.yaml") -> SchedulerConfig:
    """Validate a loaded document; raise :class:`UserError` with one line per problem."""
    return validate_settings(SchedulerConfig, data, source=source)


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    """Read ``scheduler.yaml``; relative paths in it become relative to the file."""
    p = Path(path)
    cfg = read_settings(p, SchedulerConfig)
    base = p.resolve().parent
    policy = cfg.policy
    if is_agent(policy):
        try:
            spec = parse_agent_name(policy)
        except PlacementError:
            pass  # left as written: the placer's check says what is wrong with it
        else:
            policy = replace(spec, path=resolve_path(base, spec.path) or spec.path).text
    return cfg.model_copy(
        update={
            "kubeconfig": resolve_path(base, cfg.kubeconfig),
            "workload": resolve_path(base, cfg.workload),
            "policy": policy,
        }
    )
