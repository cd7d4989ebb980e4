"""The CRD's CEL rules (``x-kubernetes-validations``): Kale's cross-field checks, for the API
server.

Why here and named: ``kubectl apply`` of a job with ``minWorkers > maxWorkers`` should fail at
the API server, not tick after tick as an ``InvalidSpec`` condition. Each rule carries the
name of the Python check it mirrors (a key of :data:`autoscaler.job.rules.RULES`, or
``field:<path>`` for a single field's bounds), and a test asserts every Python rule has a CEL
mirror and every CEL rule a Python one — and evaluates the rules on hostile specs.

Durations are ``int-or-string`` (``90``, ``"1h30m"``); CEL has no parser for Kale's units
(``d``, ``w``), so :func:`seconds` builds one from the Kubernetes CEL libraries (``findAll``
from the regex library, ``sum`` from the lists library, ``lowerAscii`` from the strings
library). Durations compare as whole milliseconds, exactly as :mod:`autoscaler.job.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.job.rules import DEFAULT_LIMITS, MAX_HORIZON_STEPS

_NUM = r"[0-9]+(\\.[0-9]+)?"  # as written inside a single-quoted CEL string


def seconds(expr: str) -> str:
    """CEL for the seconds in a Kale duration ``expr`` (an int, or a string like ``1h30m``)."""
    factors = "p.endsWith('ms') ? 0.001 : p.endsWith('s') ? 1.0 : p.endsWith('m') ? 60.0 : "
    factors += "p.endsWith('h') ? 3600.0 : p.endsWith('d') ? 86400.0 : 604800.0"
    parts = (
        f"{expr}.lowerAscii().findAll('{_NUM}(ms|s|m|h|d|w)')"
        f".map(p, double(p.find('^{_NUM}')) * ({factors})).sum()"
    )
    return (
        f"(type({expr}) == int ? double({expr}) : "
        f"({expr}.matches('^{_NUM}$') ? double({expr}) : {parts}))"
    )


def _ms(expr: str) -> str:
    return f"int({expr} * 1000.0 + 0.5)"


def _or_default(obj: str, field: str, default: float) -> str:
    return f"(has({obj}.{field}) ? {seconds(f'{obj}.{field}')} : {default:.1f})"


def _is_auto(expr: str) -> str:
    return f"(type({expr}) == string && {expr} == 'auto')"


@dataclass(frozen=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry and the Python check it mirrors."""

    mirrors: str
    """A key of ``autoscaler.job.rules.RULES``, or ``field:<dotted.path>``."""
    at: tuple[str, ...]
    """Where in the job the rule sits (``()``: the object's root, ``self`` is the job)."""
    rule: str
    message: str

    def entry(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


_I = _or_default("self", "interval", 60.0)
_H = _or_default("self", "horizon", 3600.0)
_R = _or_default("self", "refit", 86400.0)
_SPEC_H = f"(has(self.forecast) ? {_or_default('self.forecast', 'horizon', 3600.0)} : 3600.0)"


def _with_h_i(body: str) -> str:
    """``body`` with ``h`` and ``i`` bound to the horizon and interval in seconds (CEL has no
    ``let``; a one-element ``all`` binds a name everywhere, without ``cel.bind``)."""
    return f"[{_H}].all(h, [{_I}].all(i, {body}))"


CROSS_FIELD: tuple[CelRule, ...] = (
    CelRule(
        "field:metadata.name",
        (),
        "size(self.metadata.name) <= 63 && "
        "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)",
    ),
    CelRule(
        "min-workers-le-max-workers",
        ("spec", "training"),
        "!has(self.minWorkers) || self.minWorkers <= self.maxWorkers",
        "minWorkers must be ≤ maxWorkers",
    ),
    CelRule(
        "sync-batch-ge-max-workers",
        ("spec", "training"),
        "self.mode != 'sync' || self.globalBatchSize >= self.maxWorkers",
        "globalBatchSize must be ≥ maxWorkers in sync mode (one sample per worker per step)",
    ),
    CelRule(
        "horizon-ge-interval",
        ("spec", "forecast"),
        f"{_H} >= {_I}",
        "horizon must be ≥ interval",
    ),
    CelRule(
        "interval-divides-horizon",
        ("spec", "forecast"),
        _with_h_i(f"h < i || {_ms('h')} % {_ms('i')} == 0"),
        "interval must divide horizon",
    ),
    CelRule(
        "horizon-steps-bounded",
        ("spec", "forecast"),
        _with_h_i(f"h < i || {_ms('h')} <= {MAX_HORIZON_STEPS} * {_ms('i')}"),
        f"horizon must be at most {MAX_HORIZON_STEPS} steps of interval",
    ),
    CelRule(
        "refit-ge-interval",
        ("spec", "forecast"),
        f"{_R} >= {_I}",
        "refit must be ≥ interval",
    ),
    CelRule(
        "horizon-ge-rescale",
        ("spec",),
        f"{_is_auto('self.rescale.duration')} || {_SPEC_H} >= {seconds('self.rescale.duration')}",
        "forecast.horizon must be ≥ rescale.duration (a resize is planned before the load)",
    ),
    CelRule(
        "measurement-only-with-auto",
        ("spec", "rescale"),
        f"!has(self.measurement) || {_is_auto('self.duration')}",
        "measurement is only used with duration: auto",
    ),
    CelRule(
        "measurement-required-with-auto",
        ("spec", "rescale"),
        f"!{_is_auto('self.duration')} || has(self.measurement)",
        "measurement is required when duration is auto (the JSON written by `kale profile`)",
    ),
    CelRule(
        "statefulset-needs-names",
        ("spec", "target"),
        "self.kind != 'StatefulSet' || (has(self.workers) && has(self.ps))",
        "workers and ps (the StatefulSets' names) are required when kind is StatefulSet",
    ),
    CelRule(
        "tfjob-needs-name",
        ("spec", "target"),
        "self.kind != 'TFJob' || has(self.name)",
        "name is required when kind is TFJob",
    ),
    CelRule(
        "pytorchjob-needs-name",
        ("spec", "target"),
        "self.kind != 'PyTorchJob' || has(self.name)",
        "name is required when kind is PyTorchJob",
    ),
    CelRule(
        "scale-needs-target-ref",
        ("spec", "target"),
        "self.kind != 'Scale' || has(self.scaleTargetRef)",
        "scaleTargetRef (apiVersion, kind, name) is required when kind is Scale",
    ),
    CelRule(
        "scale-refs-only-with-scale",
        ("spec", "target"),
        "self.kind == 'Scale' || (!has(self.scaleTargetRef) && !has(self.psRef))",
        "scaleTargetRef and psRef are only used when kind is Scale",
    ),
    CelRule(
        "ps-ref-differs",
        ("spec", "target"),
        "!has(self.psRef) || !has(self.scaleTargetRef) "
        "|| self.psRef.apiVersion != self.scaleTargetRef.apiVersion "
        "|| self.psRef.kind != self.scaleTargetRef.kind "
        "|| self.psRef.name != self.scaleTargetRef.name",
        "psRef must name another object than scaleTargetRef",
    ),
    CelRule(
        "throughput-one-source",
        ("spec", "throughput"),
        "(has(self.model) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) "
        "+ (has(self.inline) ? 1 : 0) == 1",
        "needs exactly one of model, configMapRef or inline",
    ),
    CelRule(
        "inline-theta-count",
        ("spec", "throughput", "inline"),
        "size(self.theta) == (self.family == 'general' ? (self.mode == 'sync' ? 6 : 4) "
        ": self.family == 'fixed-ratio' ? 3 : self.family == 'linear' ? 1 "
        ": (self.mode == 'sync' ? 5 : 4))",
        "theta must have as many coefficients as the family has (general 6 sync / 4 async, "
        "fixed-ratio 3, linear 1, optimus 5 sync / 4 async)",
    ),
    CelRule(
        "tls-client-pair",
        ("spec", "source", "kafka", "tls", "secretRef"),
        "has(self.certKey) == has(self.keyKey)",
        "certKey and keyKey go together (a client certificate needs its private key)",
    ),
    CelRule(
        "local-needs-command",
        ("spec", "target"),
        "self.kind != 'Local' || (has(self.command) && size(self.command) > 0)",
        "command is required when kind is Local",
    ),
)


def floor(dotted: str, low: float, inclusive: bool) -> tuple[float, bool]:
    """A duration field's lower bound in the CRD: the model's, or the platform's default
    floor where :class:`autoscaler.job.rules.JobLimits` sets a higher one."""
    if dotted == "spec.forecast.interval":
        return max(low, DEFAULT_LIMITS.min_forecast_interval_s), True
    return low, inclusive


def duration_range(
    path: tuple[str, ...], *, low: float, low_inclusive: bool, high: float, auto: bool = False
) -> CelRule:
    """The bounds of one duration field, for its string form (the integer form is also
    bounded by ``minimum``/``maximum``, which the API server checks without CEL)."""
    dotted = ".".join(path)
    low, low_inclusive = floor(dotted, low, low_inclusive)
    op = ">=" if low_inclusive else ">"
    check = f"[{seconds('self')}].all(s, s {op} {low!r} && s <= {high!r})"
    rule = f"{_is_auto('self')} || ({check})" if auto else check
    lo = f"{'≥' if low_inclusive else '>'} {low:g}s"
    return CelRule(f"field:{dotted}", path, rule, f"must be a duration {lo} and ≤ {high:g}s")
