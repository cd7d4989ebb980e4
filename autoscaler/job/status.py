"""The ElasticTrainingJob's status as the controller writes it: the CRD's status schema.

Why a module of its own: the status is a contract with everyone who reads the job
(``kubectl describe``, the scale subresource, dashboards), so its shape is declared once as
pydantic models; :mod:`autoscaler.job.crd` turns them into the CRD's structural schema
and :mod:`autoscaler.controller.status` builds the documents the controller writes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


_DATE_TIME: JsonDict = {"format": "date-time"}


class Condition(_Status):
    """One condition, shaped as Kubernetes' metav1.Condition."""

    type: str = Field(
        description="Ready, MetricsAvailable, TargetAvailable, "
        "ForecastAvailable, QuotaLimited, Resizing or Paused."
    )
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(description="CamelCase reason of the last transition.")
    message: str = ""
    last_transition_time: str = Field(
        description="When status last changed (RFC 3339).", json_schema_extra=_DATE_TIME
    )
    observed_generation: int | None = Field(
        default=None, description="The job's metadata.generation this condition was set for."
    )


class LastDecision(_Status):
    time: str = Field(
        description="When the decision was made (RFC 3339).", json_schema_extra=_DATE_TIME
    )
    action: str = Field(
        description="scale_up, scale_down, hold, hold_metrics_unavailable, "
        "hold_warming_up, hold_quota or resize_failed."
    )
    reason: str = Field(default="", description="Why, in words.")
    workers: int | None = None
    ps: int | None = None
    details: dict[str, Any] = Field(
        default_factory=dict, description="The planner's structured reason."
    )


class ForecastSummary(_Status):
    model: str
    next: float | None = Field(
        default=None, description="Forecast rate of the current interval (samples/s)."
    )
    peak: float | None = Field(
        default=None, description="Peak of the planned-for quantile over the horizon (samples/s)."
    )
    horizon_seconds: float | None = None
    fitted_at: str | None = Field(
        default=None,
        description="When the model was last fitted (RFC 3339).",
        json_schema_extra=_DATE_TIME,
    )
    note: str | None = Field(
        default=None, description="Why there is no forecast, or which fallback is used."
    )


class MeasuredTraffic(_Status):
    arrival_rate: float
    consumption_rate: float
    lag: float
    oldest_age_seconds: float


class JobStatus(_Status):
    """What the Kale controller observed, decided and did for this job."""

    observed_generation: int | None = None
    replicas: int | None = Field(
        default=None,
        description="Current workers, for the scale subresource (kubectl scale, HPA, KEDA).",
    )
    label_selector: str | None = Field(
        default=None, description="Selector of the worker pods, for the scale subresource."
    )
    current_workers: int | None = None
    current_ps: int | None = Field(default=None, alias="currentPS")
    desired_workers: int | None = Field(default=None, description="After quota approval.")
    desired_ps: int | None = Field(default=None, alias="desiredPS")
    planned_workers: int | None = Field(
        default=None, description="The planner's wish before quota approval."
    )
    last_decision: LastDecision | None = None
    last_resize_time: str | None = Field(default=None, json_schema_extra=_DATE_TIME)
    forecast: ForecastSummary | None = None
    metrics: MeasuredTraffic | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    planner_state: dict[str, Any] = Field(
        default_factory=dict, description="Controller state that survives restarts and hand-overs."
    )
    controller: str | None = Field(
        default=None, description="Identity of the replica that wrote this status."
    )
    shard: int | None = Field(
        default=None,
        ge=0,
        description="The shard the job belongs to when jobs are spread over controller "
        "replicas (controller.yaml's shards); the replica holding its Lease plans it.",
    )
