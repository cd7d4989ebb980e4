"""Jobs from the cluster: ElasticTrainingJob custom resources, validated only when they change.

Why a module of its own: the cluster source has concerns a directory of files has not —
admission of objects anyone with RBAC could create, ConfigMaps and Secrets the jobs name,
and a validation cache keyed on what the API server says changed (uid, generation, kept
metadata) so the status writes of every tick cost nothing. Both sources yield the same
:class:`~autoscaler.controller.jobs.JobEntry`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoscaler.controller.jobs import (
    INVALID_RECHECK_S,
    InvalidJob,
    JobEntry,
    Listing,
    job_fingerprint,
    model_stamp,
    without_overrides,
)
from autoscaler.job.admission import (
    AdmissionPolicy,
    admit_object,
    cluster_policy,
)
from autoscaler.job.loading import LoadedJob
from autoscaler.job.references import ReferenceProblem, References

log = logging.getLogger(__name__)


_KEEP_METADATA = ("name", "namespace", "labels", "annotations")


class ClusterJobs:
    """ElasticTrainingJob custom resources, read through ``lister`` (an actuator's ``list``,
    or the cache a watch keeps).

    Relative ``spec.throughput.model`` paths resolve against ``models_dir`` (a mounted
    ConfigMap in the Deployment). Each job is admitted by ``policy`` (default: cluster mode's
    safe one — no Local targets, in-cluster brokers, model files inside ``models_dir``). An
    object is validated again only when what is validated changed — its spec and the
    metadata kept — so status writes (a new resourceVersion every tick) cost nothing (an
    invalid one is checked again every :data:`INVALID_RECHECK_S`); whatever validating one
    object raises makes it an invalid job.
    """

    def __init__(
        self,
        lister: Callable[[], list[dict[str, Any]]],
        *,
        models_dir: str | Path = ".",
        policy: AdmissionPolicy | None = None,
        config_maps: Callable[[str, str, str], Any] | None = None,
        secrets: Callable[[str, str], Any] | None = None,
    ) -> None:
        self.lister = lister
        self.refs = References(config_maps=config_maps, secrets=secrets)
        """ConfigMaps and Secrets the jobs name, read in their namespaces
        (:mod:`kube.configmaps`, :mod:`kube.secrets`)."""
        self.models_dir = Path(models_dir)
        self.policy = policy or cluster_policy(models_root=self.models_dir)
        self._parsed: dict[str, tuple[str, Any, str, float, str | None]] = {}
        self.parses = 0
        """Objects validated so far (a test watches it)."""

    def list(self) -> Listing:
        out = Listing()
        parsed: dict[str, tuple[str, Any, str, float, str | None]] = {}
        for obj in self.lister():
            md = obj.get("metadata") if isinstance(obj, dict) else None
            md = md if isinstance(md, dict) else {}
            key = f"{md.get('namespace', 'default')}/{md.get('name', '?')}"
            doc = {k: v for k, v in obj.items() if k != "status"}
            doc["metadata"] = {k: md[k] for k in _KEEP_METADATA if k in md}
            try:
                hit = self._parsed.get(key)
                now = time.monotonic()
                fresh = hit is not None and not (
                    isinstance(hit[1], InvalidJob) and now - hit[3] >= INVALID_RECHECK_S
                )
                # The API server bumps metadata.generation on every spec change: with the
                # same uid, generation and kept metadata, the spec is the one validated.
                quick = _quick_key(md, doc["metadata"])
                if fresh and hit is not None and quick is not None and hit[4] == quick:
                    digest, result, spec_fp, read_at = hit[0], hit[1], hit[2], hit[3]
                else:
                    digest = job_fingerprint(doc)
                    if fresh and hit is not None and hit[0] == digest:
                        result, spec_fp, read_at = hit[1], hit[2], hit[3]
                    else:
                        self.parses += 1
                        result = self._parse(key, doc, md)
                        spec = without_overrides(doc).get("spec")
                        spec_fp, read_at = job_fingerprint(spec), now
            except Exception as exc:  # RecursionError, MemoryError, a bug: this job only
                digest, spec_fp, read_at, quick = "", "", time.monotonic(), None
                result = InvalidJob(
                    key,
                    [f"{key}: cannot read: {type(exc).__name__}: {str(exc)[:200]}"],
                    uid=md.get("uid"),
                    origin="cluster",
                )
            parsed[key] = (digest, result, spec_fp, read_at, quick)
            if isinstance(result, InvalidJob):
                out.invalid.append(result)
                continue
            loaded: LoadedJob = result
            try:
                model = self.refs.model(key, loaded.job)
                security = self.refs.security(key, loaded.job)
            except ReferenceProblem as exc:
                out.invalid.append(
                    InvalidJob(key, [f"{key}: {exc}"], uid=md.get("uid"), origin="cluster")
                )
                continue
            stamp = model_stamp(loaded) if model is None else f"configmap:{model[0]}"
            out.jobs.append(
                JobEntry(
                    key=key,
                    loaded=loaded,
                    uid=md.get("uid"),
                    generation=md.get("generation"),
                    status=obj.get("status"),
                    origin="cluster",
                    fingerprint=job_fingerprint(spec_fp, stamp),
                    model_data=None if model is None else model[1],
                    kafka_security=security,
                )
            )
        self._parsed = parsed
        return out

    def _parse(self, key: str, doc: dict[str, Any], md: dict[str, Any]) -> LoadedJob | InvalidJob:
        job_path = self.models_dir / f"{md.get('name', '_')}.yaml"
        loaded, problems = admit_object(doc, key=key, policy=self.policy, job_path=job_path)
        if loaded is None:
            return InvalidJob(key, problems, uid=md.get("uid"), origin="cluster")
        return loaded


def _quick_key(md: dict[str, Any], kept: dict[str, Any]) -> str | None:
    """(uid, generation, kept metadata) as a string; None without a generation."""
    generation = md.get("generation")
    if generation is None or md.get("uid") is None:
        return None
    return f"{md['uid']}/{generation}/{kept!r}"
