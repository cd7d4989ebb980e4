"""Where the controller's jobs come from: a directory of YAML files, or the cluster.

Every source (:class:`DirectoryJobs`, :class:`StaticJobs`, and
:class:`~autoscaler.controller.cluster_jobs.ClusterJobs`) yields the same :class:`JobEntry` (a
validated job, its key, and a fingerprint that changes whenever the job must be rebuilt), so
the loop does not care which mode it runs in. Invalid jobs are reported, never fatal: one bad
file must not stop the other jobs.

A failure to *list* (the API server is down) raises; the loop then skips the tick and keeps
every job as it is. An empty answer and a failed answer are not the same thing: only the
former makes the controller forget jobs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autoscaler.job.admission import (
    LOCAL_POLICY,
    AdmissionPolicy,
    admit_file,
)
from autoscaler.job.loading import LoadedJob
from autoscaler.job.overrides import PAUSED, PAUSED_REPLICAS
from autoscaler.job.references import ReferenceProblem, References
from autoscaler.job.schema import KIND, ElasticTrainingJob
from autoscaler.kafka.credentials import LocalSecrets
from common.errors import UserError
from common.yamldoc import read_one_document

log = logging.getLogger(__name__)

OVERRIDE_ANNOTATIONS = (PAUSED, PAUSED_REPLICAS)


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
    model_data: Any = None
    """The throughput model JSON read from the job's ConfigMap (``spec.throughput.
    configMapRef``, cluster mode); None for a file or inline model."""
    kafka_security: Any = None
    """The job's Kafka SASL/TLS, its Secrets resolved (None: plaintext)."""

    @property
    def job(self) -> ElasticTrainingJob:
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


def job_fingerprint(data: Any, *extra: str) -> str:
    """A short digest of ``data`` and ``extra``: equal exactly when the job needs no rebuild."""
    h = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


def without_overrides(doc: Any) -> Any:
    """The job document minus what pauses or pins it (``spec.replicas`` and the pause
    annotations): those are read every tick, and changing them must not rebuild the job
    (a rebuild refits its forecaster)."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    spec = out.get("spec")
    if isinstance(spec, dict) and "replicas" in spec:
        out["spec"] = {k: v for k, v in spec.items() if k != "replicas"}
    md = out.get("metadata")
    if isinstance(md, dict) and isinstance(md.get("annotations"), dict):
        notes = {k: v for k, v in md["annotations"].items() if k not in OVERRIDE_ANNOTATIONS}
        out["metadata"] = {**md, "annotations": notes}
    return out


def model_stamp(loaded: LoadedJob) -> str:
    """When the job's model file last changed (a new model rebuilds the job's sizing)."""
    if loaded.job.spec.throughput.model is None:
        return "inline-or-configmap"  # the spec (or the ConfigMap's version) says the rest
    path = loaded.throughput_model_path
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_mtime_ns}:{st.st_size}"


@dataclass
class _FileRead:
    """What one file said the last time it was read, and how to tell it changed since."""

    stamp: tuple[int, int, int]
    """(mtime_ns, size, inode) when it was read."""
    digest: str
    """SHA-256 of the bytes (a touch that changes nothing is not a change)."""
    racy: bool
    """Modified so recently that a second write within the clock's granularity could keep
    the stamp: read it again next time (git's "racily clean" rule)."""
    kind: str
    """``job``, ``invalid`` or ``other`` (not an ElasticTrainingJob: skipped)."""
    loaded: LoadedJob | None = None
    data: Any = None
    invalid: InvalidJob | None = None
    read_at: float = 0.0
    """Monotonic time of the read: an invalid file is checked again after
    :data:`INVALID_RECHECK_S` even unchanged (a model file it names may have appeared)."""


#: A file modified less than this before it was read may change again unseen.
RACY_NS = 2_000_000_000
#: An unchanged invalid job is validated again this often (the files it names may change).
INVALID_RECHECK_S = 60.0


class DirectoryJobs:
    """Every ``*.yaml``/``*.yml`` under a directory whose ``kind`` is ElasticTrainingJob.

    Files of another kind (a controller.yaml next to the jobs) are skipped quietly. Each job
    is admitted by ``policy`` (local mode's default allows every target kind and broker).
    The listing is level-triggered — every call returns every job — but a file is only read
    and validated again when its (mtime, size, inode) stamp changed and its bytes hash
    differently: a tick over 5,000 unchanged files costs 5,000 ``stat`` calls. Whatever
    reading or validating one file raises makes that file an invalid job, never a failed
    listing.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        policy: AdmissionPolicy | None = None,
        secrets: Callable[[str, str], Any] | None = None,
    ) -> None:
        self.refs = References(secrets=secrets)
        """Secrets the jobs name (local mode: environment and files,
        :class:`autoscaler.kafka.credentials.LocalSecrets`); ConfigMaps are refused here."""
        self.directory = Path(directory)
        self.policy = policy or LOCAL_POLICY
        self._files: dict[Path, _FileRead] = {}
        self.reads = 0
        """Files read and validated so far (a test and the benchmark watch it)."""

    def list(self) -> Listing:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"jobs directory {self.directory} does not exist")
        out = Listing()
        seen: dict[str, str] = {}
        paths = sorted([*self.directory.glob("*.yaml"), *self.directory.glob("*.yml")])
        files: dict[Path, _FileRead] = {}
        for path in paths:
            read = self._read(path)
            if read is None:
                continue  # vanished between the listing and the stat
            files[path] = read
            if read.kind == "other":
                continue
            if read.kind == "invalid":
                assert read.invalid is not None
                out.invalid.append(read.invalid)
                continue
            loaded = read.loaded
            assert loaded is not None
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
            try:
                security = self.refs.security(key, loaded.job)
            except ReferenceProblem as exc:
                out.invalid.append(InvalidJob(key, [f"{path}: {exc}"], origin=str(path)))
                continue
            out.jobs.append(
                JobEntry(
                    key=key,
                    loaded=loaded,
                    origin=str(path),
                    fingerprint=job_fingerprint(
                        without_overrides(read.data), str(path), model_stamp(loaded)
                    ),
                    kafka_security=security,
                )
            )
        self._files = files
        return out

    def _read(self, path: Path) -> _FileRead | None:
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        old = self._files.get(path)
        if (
            old is not None
            and old.kind == "invalid"
            and time.monotonic() - old.read_at >= INVALID_RECHECK_S
        ):
            old = None  # check it again, as if it had changed
        if old is not None and old.stamp == stamp and not old.racy:
            return old
        now_ns = time.time_ns()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            return _unreadable(path, stamp, exc)
        digest = hashlib.sha256(raw).hexdigest()
        racy = now_ns - st.st_mtime_ns < RACY_NS
        if old is not None and old.digest == digest:
            old.stamp, old.racy = stamp, racy
            return old
        self.reads += 1
        try:
            read = self._parse(path)
        except Exception as exc:  # RecursionError, MemoryError, a bug: this file only
            log.warning("reading job file %s failed: %s", path, exc)
            read = _unreadable(path, stamp, exc)
        read.stamp, read.digest, read.racy = stamp, digest, racy
        read.read_at = time.monotonic()
        return read

    def _parse(self, path: Path) -> _FileRead:
        data, problems = read_one_document(path)
        if not problems and (not isinstance(data, dict) or data.get("kind") != KIND):
            return _FileRead((0, 0, 0), "", False, "other")
        loaded, errors = admit_file(path, self.policy)
        if loaded is None:
            key = f"file:{path.name}"
            if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
                md = data["metadata"]
                key = f"{md.get('namespace', 'default')}/{md.get('name', path.stem)}"
            bad = InvalidJob(key, errors or [f"{path}: invalid"], origin=str(path))
            return _FileRead((0, 0, 0), "", False, "invalid", invalid=bad)
        return _FileRead((0, 0, 0), "", False, "job", loaded=loaded, data=data)


def _unreadable(path: Path, stamp: tuple[int, int, int], exc: BaseException) -> _FileRead:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    bad = InvalidJob(
        f"file:{path.name}",
        [f"{path}: cannot read: {type(exc).__name__}{': ' + text if text else ''}"],
        origin=str(path),
    )
    return _FileRead(stamp, "", True, "invalid", invalid=bad, read_at=time.monotonic())


class StaticJobs:
    """A fixed list of job files (``kale plan --job``); their Kafka Secrets are read once,
    locally (:class:`autoscaler.kafka.credentials.LocalSecrets`: environment and files)."""

    def __init__(self, loaded: list[LoadedJob], *, secrets: Any = None) -> None:
        refs = References(secrets=secrets or LocalSecrets().read)
        self.entries = []
        for j in loaded:
            key = f"{j.job.metadata.namespace}/{j.name}"
            try:
                security = refs.security(key, j.job)
            except ReferenceProblem as exc:
                raise UserError(f"{j.path or key}: {exc}") from None
            self.entries.append(
                JobEntry(
                    key=key,
                    loaded=j,
                    fingerprint="static",
                    origin=str(j.path or ""),
                    kafka_security=security,
                )
            )

    def list(self) -> Listing:
        return Listing(jobs=list(self.entries))
