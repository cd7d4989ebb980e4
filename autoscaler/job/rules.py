"""Relations between fields of an ElasticTrainingJob, each a named rule.

Why named: the same rules are written twice — here in Python for ``kale validate`` and the
controller, and as CEL ``x-kubernetes-validations`` in the CRD so the API server refuses the
job before Kale ever sees it (``autoscaler/job/crd.py`` maps each CEL rule to a name
in :data:`RULES`, and a test fails when a rule has no mirror). Every message names both
fields of a conflict, as KEDA's ``Validate()`` does.

:class:`JobLimits` holds the bounds a platform may tune (the controller config's
``policy.limits``); the defaults are what ``kale validate`` and the CRD enforce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.job.schema import ElasticTrainingJob

Problem = tuple[str, str]  # (dotted.field.path, reason)

MAX_HORIZON_STEPS = 10_080
"""horizon / interval: a week of one-minute steps. The forecasters allocate per step, so
this bounds a forecast's memory whatever the durations (``99999999999w`` was a MemoryError)."""


@dataclass(frozen=True)
class JobLimits:
    """Bounds a platform may tighten or relax (``policy.limits`` in the controller config)."""

    min_forecast_interval_s: float = 10.0
    """``spec.forecast.interval`` floor: each step is a row of history per job, so a tiny
    interval makes every tick's history enormous. A time-compressed demo lowers it
    (docs/decisions/0070-bounded-job-input-and-admission-policy.md)."""


DEFAULT_LIMITS = JobLimits()


def _min_max(job: ElasticTrainingJob) -> list[Problem]:
    tr = job.spec.training
    if tr.min_workers > tr.max_workers:
        return [
            (
                "spec.training.minWorkers",
                f"must be ≤ spec.training.maxWorkers ({tr.min_workers} > {tr.max_workers})",
            )
        ]
    return []


def _sync_batch(job: ElasticTrainingJob) -> list[Problem]:
    tr = job.spec.training
    if tr.mode == "sync" and tr.global_batch_size < tr.max_workers:
        return [
            (
                "spec.training.globalBatchSize",
                "must be ≥ spec.training.maxWorkers in sync mode: each worker needs at least "
                f"one sample per step ({tr.global_batch_size} < {tr.max_workers})",
            )
        ]
    return []


def _ms(seconds: float) -> int:
    """Durations compared as whole milliseconds, exactly as the CRD's CEL rules do."""
    return int(seconds * 1000.0 + 0.5)


def _horizon_interval(job: ElasticTrainingJob) -> list[Problem]:
    fc = job.spec.forecast
    if fc.horizon < fc.interval:
        return [
            (
                "spec.forecast.horizon",
                f"must be ≥ spec.forecast.interval ({fc.horizon:g}s < {fc.interval:g}s)",
            )
        ]
    return []


def _interval_divides(job: ElasticTrainingJob) -> list[Problem]:
    fc = job.spec.forecast
    if fc.horizon >= fc.interval and _ms(fc.horizon) % _ms(fc.interval) != 0:
        return [
            (
                "spec.forecast.interval",
                "must divide spec.forecast.horizon "
                f"({fc.horizon:g}s is not a multiple of {fc.interval:g}s)",
            )
        ]
    return []


def _horizon_steps(job: ElasticTrainingJob) -> list[Problem]:
    fc = job.spec.forecast
    if fc.horizon >= fc.interval and _ms(fc.horizon) > MAX_HORIZON_STEPS * _ms(fc.interval):
        return [
            (
                "spec.forecast.horizon",
                f"is {fc.horizon / fc.interval:.0f} steps of spec.forecast.interval; at most "
                f"{MAX_HORIZON_STEPS} are allowed (a week of one-minute steps)",
            )
        ]
    return []


def _horizon_rescale(job: ElasticTrainingJob) -> list[Problem]:
    fc, rs = job.spec.forecast, job.spec.rescale
    if rs.duration != "auto" and fc.horizon < rs.duration:
        return [
            (
                "spec.forecast.horizon",
                "must be ≥ spec.rescale.duration so a resize can be planned before the load "
                f"arrives ({fc.horizon:g}s < {rs.duration:g}s)",
            )
        ]
    return []


def _measurement_only_auto(job: ElasticTrainingJob) -> list[Problem]:
    rs = job.spec.rescale
    if rs.duration != "auto" and rs.measurement is not None:
        return [("spec.rescale.measurement", "is only used with spec.rescale.duration: auto")]
    return []


def _measurement_with_auto(job: ElasticTrainingJob) -> list[Problem]:
    rs = job.spec.rescale
    if rs.duration == "auto" and rs.measurement is None:
        return [
            (
                "spec.rescale.measurement",
                "is required when spec.rescale.duration is auto "
                "(the JSON written by `kale profile`)",
            )
        ]
    return []


def _refit_interval(job: ElasticTrainingJob) -> list[Problem]:
    fc = job.spec.forecast
    if fc.refit < fc.interval:
        return [
            (
                "spec.forecast.refit",
                f"must be ≥ spec.forecast.interval ({fc.refit:g}s < {fc.interval:g}s)",
            )
        ]
    return []


def _statefulset_names(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind != "StatefulSet":
        return []
    return [
        (
            f"spec.target.{field}",
            "is required when spec.target.kind is StatefulSet (the StatefulSet's name)",
        )
        for field in ("workers", "ps")
        if not getattr(tg, field)
    ]


def _tfjob_name(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind == "TFJob" and not tg.name:
        return [("spec.target.name", "is required when spec.target.kind is TFJob")]
    return []


def _pytorchjob_name(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind == "PyTorchJob" and not tg.name:
        return [("spec.target.name", "is required when spec.target.kind is PyTorchJob")]
    return []


def _scale_target_ref(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind == "Scale" and tg.scale_target_ref is None:
        return [
            (
                "spec.target.scaleTargetRef",
                "is required when spec.target.kind is Scale (apiVersion, kind and name of the "
                "workers' object, which must have a scale subresource)",
            )
        ]
    return []


def _refs_only_with_scale(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind == "Scale":
        return []
    return [
        (
            f"spec.target.{field}",
            f"is only used when spec.target.kind is Scale (spec.target.kind is {tg.kind})",
        )
        for field, value in (("scaleTargetRef", tg.scale_target_ref), ("psRef", tg.ps_ref))
        if value is not None
    ]


def _ps_ref_differs(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.ps_ref is not None and tg.ps_ref == tg.scale_target_ref:
        return [
            (
                "spec.target.psRef",
                "names the same object as spec.target.scaleTargetRef: the workers and the "
                "parameter servers need objects of their own (leave psRef out for no PS)",
            )
        ]
    return []


def _local_command(job: ElasticTrainingJob) -> list[Problem]:
    tg = job.spec.target
    if tg.kind == "Local" and not tg.command:
        return [("spec.target.command", "is required when spec.target.kind is Local (argv to run)")]
    return []


THETA_COUNT: dict[tuple[str, str], int] = {
    ("sync", "general"): 6,
    ("sync", "fixed-ratio"): 3,
    ("sync", "linear"): 1,
    ("sync", "optimus"): 5,
    ("async", "general"): 4,
    ("async", "fixed-ratio"): 3,
    ("async", "linear"): 1,
    ("async", "optimus"): 4,
}
"""Coefficients per (mode, family), as :mod:`throughput.families` defines them (a test keeps
the two equal; this copy spares ``kale validate`` importing numpy)."""


def _one_throughput_source(job: ElasticTrainingJob) -> list[Problem]:
    ref = job.spec.throughput
    given = [
        n
        for n, v in (
            ("model", ref.model),
            ("configMapRef", ref.config_map_ref),
            ("inline", ref.inline),
        )
        if v is not None
    ]
    if len(given) != 1:
        return [
            (
                "spec.throughput",
                "needs exactly one of model (a file), configMapRef (a ConfigMap in the job's "
                f"namespace) or inline (the coefficients); got {', '.join(given) or 'none'}",
            )
        ]
    return []


def _inline_theta_count(job: ElasticTrainingJob) -> list[Problem]:
    inline = job.spec.throughput.inline
    if inline is None:
        return []
    want = THETA_COUNT[(inline.mode, inline.family)]
    if len(inline.theta) != want:
        return [
            (
                "spec.throughput.inline.theta",
                f"has {len(inline.theta)} coefficients; spec.throughput.inline.family "
                f"{inline.family} ({inline.mode}) has {want}",
            )
        ]
    return []


def _tls_client_pair(job: ElasticTrainingJob) -> list[Problem]:
    tls = job.spec.source.kafka.tls
    ref = tls.secret_ref if tls is not None else None
    if ref is not None and (ref.cert_key is None) != (ref.key_key is None):
        return [
            (
                "spec.source.kafka.tls.secretRef.certKey",
                "and spec.source.kafka.tls.secretRef.keyKey go together (a client "
                "certificate needs its private key)",
            )
        ]
    return []


RULES: dict[str, Callable[[ElasticTrainingJob], list[Problem]]] = {
    "min-workers-le-max-workers": _min_max,
    "sync-batch-ge-max-workers": _sync_batch,
    "horizon-ge-interval": _horizon_interval,
    "interval-divides-horizon": _interval_divides,
    "horizon-steps-bounded": _horizon_steps,
    "horizon-ge-rescale": _horizon_rescale,
    "measurement-only-with-auto": _measurement_only_auto,
    "measurement-required-with-auto": _measurement_with_auto,
    "refit-ge-interval": _refit_interval,
    "statefulset-needs-names": _statefulset_names,
    "tfjob-needs-name": _tfjob_name,
    "pytorchjob-needs-name": _pytorchjob_name,
    "scale-needs-target-ref": _scale_target_ref,
    "scale-refs-only-with-scale": _refs_only_with_scale,
    "ps-ref-differs": _ps_ref_differs,
    "local-needs-command": _local_command,
    "throughput-one-source": _one_throughput_source,
    "inline-theta-count": _inline_theta_count,
    "tls-client-pair": _tls_client_pair,
}
"""Every cross-field rule, by the name its CEL mirror in the CRD carries."""


def cross_check(job: ElasticTrainingJob) -> list[Problem]:
    """Relations between fields; every message names both fields of a conflict."""
    return [problem for rule in RULES.values() for problem in rule(job)]


def limit_problems(job: ElasticTrainingJob, limits: JobLimits = DEFAULT_LIMITS) -> list[Problem]:
    """The platform's tunable bounds (:class:`JobLimits`)."""
    out: list[Problem] = []
    interval = job.spec.forecast.interval
    if interval < limits.min_forecast_interval_s:
        out.append(
            (
                "spec.forecast.interval",
                f"must be ≥ {limits.min_forecast_interval_s:g}s ({interval:g}s asked): every "
                "step is a row of history per job (the platform's policy.limits sets the floor)",
            )
        )
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
    kafka = job.spec.source.kafka
    if kafka.sasl is not None and kafka.tls is None:
        out.append(
            (
                "spec.source.kafka.sasl",
                "is used without spec.source.kafka.tls: "
                + (
                    "PLAIN sends the password in the clear"
                    if kafka.sasl.mechanism == "PLAIN"
                    else "SCRAM protects the password, but the samples cross the network in "
                    "the clear"
                ),
            )
        )
    return out
