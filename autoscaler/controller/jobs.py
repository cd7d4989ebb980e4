"""Where the controller's jobs come from: a directory of YAML files, or the cluster.

Both sources yield the same :class:`JobEntry` (a validated job, its key, and a fingerprint
that changes whenever the job must be rebuilt), so the loop does not care which mode it runs
in. Invalid jobs are reported, never fatal: one bad file must not stop the other jobs.

A failure to *list* (the API server is down) raises; the loop then skips the tick and keeps
every job as it is. An empty answer and a failed answer are not the same thing: only the
former makes the controller forget jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autoscaler.config import KIND, LoadedJob, read_yaml
from autoscaler.controller.admission import (
    LOCAL_POLICY,
    AdmissionPolicy,
    admit_file,
    admit_object,
    cluster_policy,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobEntry:
    """One valid job as listed this tick."""

    key: str
    """``namespace/name``: unique among the listed jobs."""
    loaded: LoadedJob
    fingerprint: str
    """Changes when the spec (or the file it was read from) changes: rebuild the job."""
    uid: str | None = None
    generation: int | None = None
    status: dict[str, Any] | None = None
    """The status as the cluster holds it (cluster mode), to resume after a restart."""
    origin: str = ""
    """File path or ``cluster``."""

    @property
    def job(self) -> Any:
        return self.loaded.job

    @property
    def name(self) -> str:
        return self.loaded.job.metadata.name

    @property
    def namespace(self) -> str:
        return self.loaded.job.metadata.namespace


@dataclass(frozen=True)
class InvalidJob:
    """A job that failed validation, with one line per problem."""

    key: str
    problems: list[str]
    uid: str | None = None
    origin: str = ""


@dataclass
class Listing:
    jobs: list[JobEntry] = field(default_factory=list)
    invalid: list[InvalidJob] = field(default_factory=list)


class JobsSource(Protocol):
    def list(self) -> Listing:
        """This tick's jobs; raises if the source could not be read at all."""
        ...


def _fingerprint(data: Any, *extra: str) -> str:
    h = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


def _model_stamp(loaded: LoadedJob) -> str:
    path = loaded.throughput_model_path
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_mtime_ns}:{st.st_size}"


class DirectoryJobs:
    """Every ``*.yaml``/``*.yml`` under a directory whose ``kind`` is ElasticTrainingJob.

    Files of another kind (a controller.yaml next to the jobs) are skipped quietly. Each job
    is admitted by ``policy`` (local mode's default allows every target kind and broker).
    """

    def __init__(self, directory: str | Path, *, policy: AdmissionPolicy | None = None) -> None:
        self.directory = Path(directory)
        self.policy = policy or LOCAL_POLICY

    def list(self) -> Listing:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"jobs directory {self.directory} does not exist")
        out = Listing()
        seen: dict[str, str] = {}
        paths = sorted([*self.directory.glob("*.yaml"), *self.directory.glob("*.yml")])
        for path in paths:
            data, problems = read_yaml(path)
            if not problems and (not isinstance(data, dict) or data.get("kind") != KIND):
                continue
            loaded, errors = admit_file(path, self.policy)
            if loaded is None:
                key = f"file:{path.name}"
                if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
                    md = data["metadata"]
                    key = f"{md.get('namespace', 'default')}/{md.get('name', path.stem)}"
                out.invalid.append(
                    InvalidJob(key, errors or [f"{path}: invalid"], origin=str(path))
                )
                continue
            key = f"{loaded.job.metadata.namespace}/{loaded.name}"
            if key in seen:
                out.invalid.append(
                    InvalidJob(
                        key,
                        [f"{path}: metadata.name: {key} is already defined in {seen[key]}"],
                        origin=str(path),
                    )
                )
                continue
            seen[key] = str(path)
            st = path.stat()
            out.jobs.append(
                JobEntry(
                    key=key,
                    loaded=loaded,
                    origin=str(path),
                    fingerprint=_fingerprint(data, f"{st.st_mtime_ns}", _model_stamp(loaded)),
                )
            )
        return out


_KEEP_METADATA = ("name", "namespace", "labels", "annotations")


class ClusterJobs:
    """ElasticTrainingJob custom resources, read through ``lister`` (an actuator's ``list``).

    Relative ``spec.throughput.model`` paths resolve against ``models_dir`` (a mounted
    ConfigMap in the Deployment). Each job is admitted by ``policy`` (default: cluster mode's
    safe one — no Local targets, in-cluster brokers, model files inside ``models_dir``).
    """

    def __init__(
        self,
        lister: Callable[[], list[dict[str, Any]]],
        *,
        models_dir: str | Path = ".",
        policy: AdmissionPolicy | None = None,
    ) -> None:
        self.lister = lister
        self.models_dir = Path(models_dir)
        self.policy = policy or cluster_policy(models_root=self.models_dir)

    def list(self) -> Listing:
        out = Listing()
        for obj in self.lister():
            md = obj.get("metadata") or {}
            key = f"{md.get('namespace', 'default')}/{md.get('name', '?')}"
            doc = {k: v for k, v in obj.items() if k != "status"}
            doc["metadata"] = {k: md[k] for k in _KEEP_METADATA if k in md}
            job_path = self.models_dir / f"{md.get('name', '_')}.yaml"
            loaded, problems = admit_object(doc, key=key, policy=self.policy, job_path=job_path)
            if loaded is None:
                out.invalid.append(InvalidJob(key, problems, uid=md.get("uid"), origin="cluster"))
                continue
            out.jobs.append(
                JobEntry(
                    key=key,
                    loaded=loaded,
                    uid=md.get("uid"),
                    generation=md.get("generation"),
                    status=obj.get("status"),
                    origin="cluster",
                    fingerprint=_fingerprint(doc["spec"], _model_stamp(loaded)),
                )
            )
        return out


class StaticJobs:
    """A fixed list of job files (``kale plan --job``)."""

    def __init__(self, loaded: list[LoadedJob]) -> None:
        self.entries = [
            JobEntry(
                key=f"{j.job.metadata.namespace}/{j.name}",
                loaded=j,
                fingerprint="static",
                origin=str(j.path or ""),
            )
            for j in loaded
        ]

    def list(self) -> Listing:
        return Listing(jobs=list(self.entries))
