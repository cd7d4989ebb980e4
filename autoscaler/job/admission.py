"""What a namespace may ask the controller to do: the platform's admission policy.

Why: in cluster mode a job is written by a tenant but acted on by the controller, with the
controller's identity. A ``Local`` target runs its ``command`` inside the controller pod;
``bootstrapServers`` makes the controller open connections (169.254.169.254:80, the cloud
metadata service, was accepted); ``throughput.model`` makes it read a file. So in cluster
mode these are off unless the platform team allows them in ``controller.yaml``
(``policy:``), while local mode — where the job files are the operator's own — allows them.

:func:`admit` is pure (no I/O but the referenced files' checks): it returns the job's
problems, which the job sources turn into that job's ``InvalidJob`` — a refused job never
affects another job.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.job.loading import (
    LoadedJob,
    Problem,
    file_problems,
    parse_job,
    validate_document,
    validate_file,
)
from autoscaler.job.rules import DEFAULT_LIMITS, JobLimits, limit_problems
from autoscaler.job.schema import TARGET_KINDS, ElasticTrainingJob

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

CLUSTER_TARGET_KINDS = ("StatefulSet", "TFJob", "PyTorchJob", "Scale", "DryRun")
"""Cluster mode's default: ``Local`` would run a tenant's command in the controller pod."""
CLUSTER_KAFKA_HOSTS = ("*.svc", "*.svc.cluster.local")
"""Cluster mode's default: brokers that are Services of this cluster."""
CLUSTER_KAFKA_CIDRS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
"""Cluster mode's default: private (RFC 1918) addresses — never loopback (the controller pod
itself) or link-local (169.254.0.0/16: the cloud metadata service)."""


@dataclass(frozen=True)
class AdmissionPolicy:
    """What jobs may ask for; :data:`LOCAL_POLICY` and :func:`cluster_policy` are the defaults."""

    target_kinds: frozenset[str] = frozenset(TARGET_KINDS)
    """``spec.target.kind`` values allowed."""
    kafka_hosts: tuple[str, ...] | None = None
    """Broker host patterns (``fnmatch``, case-insensitive); ``None`` with no CIDRs: any host."""
    kafka_cidrs: tuple[Network, ...] = ()
    """Networks a broker given as an IPv4 address may be in."""
    models_root: Path | None = None
    """Model and measurement files must resolve (symlinks followed) inside this directory."""
    limits: JobLimits = field(default_factory=lambda: DEFAULT_LIMITS)
    """Tunable bounds on the spec (``spec.forecast.interval`` floor)."""
    check_files: bool = True
    """Check the referenced files (off for ``kale validate --no-file-checks``)."""

    @property
    def restricts_hosts(self) -> bool:
        return self.kafka_hosts is not None or bool(self.kafka_cidrs)


LOCAL_POLICY = AdmissionPolicy()


def networks(cidrs: Sequence[str]) -> tuple[Network, ...]:
    """Parse CIDRs strictly (``10.0.0.1/8`` is a typo, not ``10.0.0.0/8``)."""
    return tuple(ipaddress.ip_network(c, strict=True) for c in cidrs)


def cluster_policy(*, models_root: str | Path | None = None) -> AdmissionPolicy:
    """Cluster mode's safe default: no Local targets, in-cluster brokers, models in the root."""
    return AdmissionPolicy(
        target_kinds=frozenset(CLUSTER_TARGET_KINDS),
        kafka_hosts=CLUSTER_KAFKA_HOSTS,
        kafka_cidrs=networks(CLUSTER_KAFKA_CIDRS),
        models_root=None if models_root is None else Path(models_root),
    )


def host_allowed(host: str, policy: AdmissionPolicy) -> bool:
    """True when ``host`` matches an allowed pattern or is an address in an allowed network."""
    if not policy.restricts_hosts:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and any(address in net for net in policy.kafka_cidrs):
        return True
    lowered = host.lower()
    return any(fnmatch.fnmatchcase(lowered, p.lower()) for p in policy.kafka_hosts or ())


def admit(
    job: ElasticTrainingJob, policy: AdmissionPolicy, *, path: Path | None = None
) -> list[Problem]:
    """Every reason ``policy`` refuses ``job`` (empty: admitted).

    ``path`` is where relative file references resolve (the job file, or a file inside the
    models directory in cluster mode).
    """
    out = limit_problems(job, policy.limits)
    kind = job.spec.target.kind
    if kind not in policy.target_kinds:
        allowed = ", ".join(sorted(policy.target_kinds)) or "none"
        out.append(
            (
                "spec.target.kind",
                f"{kind} targets are not allowed by the platform's policy "
                f"(policy.allowedTargetKinds: {allowed})",
            )
        )
    for i, server in enumerate(job.spec.source.kafka.bootstrap_servers):
        host = server.rsplit(":", 1)[0]
        if not host_allowed(host, policy):
            out.append(
                (
                    f"spec.source.kafka.bootstrapServers.{i}",
                    f"{host} is not an allowed Kafka host (policy.kafka.allowedHosts / "
                    "allowedCidrs in the controller config)",
                )
            )
    if policy.check_files:
        out += file_problems(LoadedJob(job, path), root=policy.models_root)
    return out


def check_file(
    path: str | Path, policy: AdmissionPolicy, *, models_dir: str | Path | None = None
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """``kale validate --config``: (the job or None, error lines, warning lines).

    ``models_dir``: cluster mode, where relative file references resolve (as the controller
    resolves them); otherwise they resolve beside the job file.
    """
    loaded, errors, warnings = validate_file(path, check_files=False, limits=policy.limits)
    if loaded is None:
        return None, errors, warnings
    return _admitted(loaded, str(path), Path(path), policy, models_dir, warnings)


def check_document(
    data: Any,
    policy: AdmissionPolicy,
    *,
    source: str,
    path: Path,
    models_dir: str | Path | None = None,
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """:func:`check_file` for one job document read from ``source`` (``path`` stands for
    its file: a document of a multi-document stream, standard input)."""
    loaded, errors, warnings = validate_document(
        data, source=source, path=path, check_files=False, limits=policy.limits
    )
    if loaded is None:
        return None, errors, warnings
    return _admitted(loaded, source, path, policy, models_dir, warnings)


def _admitted(
    loaded: LoadedJob,
    source: str,
    path: Path,
    policy: AdmissionPolicy,
    models_dir: str | Path | None,
    warnings: list[str],
) -> tuple[LoadedJob | None, list[str], list[str]]:
    where = path if models_dir is None else Path(models_dir) / path.name
    rest = admit(loaded.job, _without_limits(policy), path=where)
    if rest:
        return None, [f"{source}: {loc}: {msg}" for loc, msg in rest], warnings
    return loaded, [], warnings


def admit_file(path: Path, policy: AdmissionPolicy) -> tuple[LoadedJob | None, list[str]]:
    """Validate and admit one job file: (the job, []) or (None, ``FILE: field: reason`` lines)."""
    loaded, errors, _ = check_file(path, policy)
    return loaded, errors


def admit_object(
    doc: dict[str, Any], *, key: str, policy: AdmissionPolicy, job_path: Path
) -> tuple[LoadedJob | None, list[str]]:
    """Validate and admit a custom resource (``status`` and server metadata already dropped).

    ``job_path`` stands for the job's file: relative references resolve beside it.
    """
    job, problems = parse_job(doc)
    if job is not None and not problems:
        problems = admit(job, policy, path=job_path)
    if job is None or problems:
        return None, [
            f"{key}: {msg}" if loc.startswith("(") else f"{key}: {loc}: {msg}"
            for loc, msg in problems
        ]
    return LoadedJob(job, job_path), []


def _without_limits(policy: AdmissionPolicy) -> AdmissionPolicy:
    """The limits were checked with the parse (one line each, not two)."""
    from dataclasses import replace

    return replace(policy, limits=JobLimits(min_forecast_interval_s=0.0))
