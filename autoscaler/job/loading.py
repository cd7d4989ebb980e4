"""The ElasticTrainingJob: what an ML engineer submits, and the checks it must pass.

Kubernetes-shaped (apiVersion/kind/metadata/spec, camelCase fields) so the same file can be
applied as a custom resource. Parsing happens in two layers, as in KEDA's scalers:

1. pydantic models (:mod:`autoscaler.job.schema`) with ``extra="forbid"`` check types, enums,
   ranges and unknown fields;
2. :func:`cross_check`, a pure function, checks relations between fields and names both
   fields of every conflict.

Every problem comes back as ``(dotted.field.path, reason)`` so the CLI can print
``FILE: spec.training.minWorkers: reason`` lines, one per problem, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)
from pydantic_core import ErrorDetails

from autoscaler.job.files import MODEL_FORMAT, outside_root, read_json_file
from autoscaler.job.overrides import problems as override_problems
from autoscaler.job.rules import (
    DEFAULT_LIMITS,
    JobLimits,
    Problem,
    advisories,
    cross_check,
    limit_problems,
)
from autoscaler.job.schema import API_VERSION, DEPRECATED_API_VERSIONS, ElasticTrainingJob
from autoscaler.job.types import DAY
from common.durations import Duration, PositiveDuration
from common.errors import UserError
from common.yamldoc import DEFAULT_LIMITS as DOCUMENT_LIMITS
from common.yamldoc import DocumentLimits, kind_of, read_one_document

__all__ = [
    "Duration",
    "ElasticTrainingJob",
    "JobLimits",
    "LoadedJob",
    "PositiveDuration",
    "Problem",
    "advisories",
    "cross_check",
    "file_problems",
    "load_job",
    "parse_job",
    "validate_file",
]

# Keys of the rescale measurement JSON, in order of preference (kale.rescale/v1 writes median_s).
MEASUREMENT_KEYS = ("median_s", "rescale_s", "duration_s", "total_s")


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) if loc else "(root)"


_TYPE_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _format_error(err: ErrorDetails) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # Union branches (e.g. 'auto' | duration) add their own tag to the location: drop it.
    loc = tuple(p for p in loc if p not in ("literal['auto']", "float"))
    kind = err["type"]
    msg = _TYPE_MESSAGES.get(kind, err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        msg = f"expected a mapping, got a {kind_of(err.get('input'))}"
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        given = err.get("input")
        if isinstance(given, dict | list):
            msg = f"{msg}, got a {kind_of(given)}"
        elif kind != "missing":
            msg = f"{msg}, got {_brief(given)}"
    return _format_loc(loc), msg


def shape_problem(data: Any, limits: DocumentLimits = DOCUMENT_LIMITS) -> Problem | None:
    """Depth and size of an already-loaded document (a custom resource from the API server
    did not pass through :mod:`common.yamldoc`), checked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            return "(root)", f"more than {limits.max_nodes} values; a job has about 60"
        if isinstance(node, dict | list):
            if depth > limits.max_depth:
                return "(root)", f"nesting deeper than {limits.max_depth} levels (a job needs 5)"
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, str) and len(node) > limits.max_scalar_chars:
            return "(root)", f"a value of {len(node)} characters"
    return None


def parse_job(data: Any) -> tuple[ElasticTrainingJob | None, list[Problem]]:
    """Validate a loaded YAML document; return the job (or None) and every problem found.

    Only what holds for every job is checked here; the platform's tunable bounds
    (:func:`autoscaler.job.rules.limit_problems`) and the referenced files are checked by
    :func:`validate_file` and the controller's admission.
    """
    if not isinstance(data, dict):
        return None, [
            ("(root)", f"expected a mapping (an ElasticTrainingJob), got a {kind_of(data)}")
        ]
    shape = shape_problem(data)
    if shape is not None:
        return None, [shape]
    try:
        job = ElasticTrainingJob.model_validate(data)
    except ValidationError as exc:
        problems = [_format_error(e) for e in exc.errors()]
        return None, _dedupe(problems)
    return job, cross_check(job) + override_problems(job.metadata.annotations)


def _dedupe(problems: list[Problem]) -> list[Problem]:
    """One line per field: unions report each branch's failure, the first one says enough."""
    seen: dict[str, str] = {}
    for path, msg in problems:
        seen.setdefault(path, msg)
    return list(seen.items())


class LoadedJob:
    """A validated job plus where it came from, so relative paths resolve against its file."""

    def __init__(self, job: ElasticTrainingJob, path: Path | None) -> None:
        self.job = job
        self.path = path

    @property
    def name(self) -> str:
        return self.job.metadata.name

    def resolve(self, relative: str) -> Path:
        p = Path(relative)
        if p.is_absolute() or self.path is None:
            return p
        return self.path.parent / p

    @property
    def throughput_model_path(self) -> Path:
        """The model file (a job whose model is inline or in a ConfigMap has none)."""
        model = self.job.spec.throughput.model
        if model is None:
            raise UserError(
                f"{self.path or self.name}: spec.throughput: the model is "
                f"{'inline' if self.job.spec.throughput.inline else 'in a ConfigMap'}, "
                "not a file"
            )
        return self.resolve(model)

    def throughput_model(self, config_map_data: Any = None) -> Any:
        """The job's :class:`throughput.model.ThroughputModel`, from whichever source the
        spec names (``config_map_data``: the JSON read from the ConfigMap, cluster mode)."""
        from throughput.errors import ThroughputError
        from throughput.model import ThroughputModel

        ref = self.job.spec.throughput
        where = f"{self.path or self.name}: spec.throughput"
        try:
            if ref.inline is not None:
                data = ref.inline.as_model_dict(self.job.spec.training.workers_per_ps)
                return ThroughputModel.from_dict(data, source=f"{where}.inline")
            if ref.config_map_ref is not None:
                if config_map_data is None:
                    raise UserError(
                        f"{where}.configMapRef: the model is read from a ConfigMap in the "
                        "job's namespace, which only the controller in cluster mode can read; "
                        "here use spec.throughput.model (a file) or spec.throughput.inline"
                    )
                cm = ref.config_map_ref
                return ThroughputModel.from_dict(
                    config_map_data, source=f"ConfigMap {cm.name} key {cm.key}"
                )
            return ThroughputModel.load(self.throughput_model_path)
        except (ThroughputError, OSError, ValueError) as exc:
            raise UserError(f"{where}: {exc}") from None

    def rescale_seconds(self) -> float:
        """``spec.rescale.duration``, or the measured median when it is ``auto``.

        The measurement is the ``kale.rescale/v1`` JSON written by ``kale profile``
        (``median_s``; older files may carry ``rescale_s``/``duration_s``/``total_s``).
        """
        rescale = self.job.spec.rescale
        if rescale.duration != "auto":
            return float(rescale.duration)
        if rescale.measurement is None:
            raise UserError(
                f"{self.path}: spec.rescale.measurement: is required when "
                "spec.rescale.duration is auto"
            )
        path = self.resolve(rescale.measurement)
        data, why = read_json_file(path)
        if why is not None:
            raise UserError(f"{self.path}: spec.rescale.measurement: {why}")
        for key in MEASUREMENT_KEYS:
            value = data.get(key) if isinstance(data, dict) else None
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 < value <= DAY  # json.loads reads Infinity and 1e400 as inf
            ):
                return float(value)
        raise UserError(
            f"{self.path}: spec.rescale.measurement: {path} has none of "
            f"{', '.join(MEASUREMENT_KEYS)} (a number of seconds in (0, 1 day])"
        )


def file_problems(loaded: LoadedJob, *, root: Path | None = None) -> list[Problem]:
    """The model and measurement files must exist, be what they claim, and stay in ``root``."""
    job = loaded.job
    out: list[Problem] = []
    # No file when the model is inline or in a ConfigMap (the controller reads that).
    model = None if job.spec.throughput.model is None else loaded.throughput_model_path
    if model is None:
        pass
    elif root is not None and outside_root(model, root):
        out.append(
            (
                "spec.throughput.model",
                f"{model} is outside the models directory {root} (the platform's policy)",
            )
        )
    else:
        data, why = read_json_file(model)
        if why is not None:
            out.append(("spec.throughput.model", why))
        elif not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            out.append(
                (
                    "spec.throughput.model",
                    f"{model} is not a throughput model (expected JSON with "
                    f'"format": "{MODEL_FORMAT}", written by `kale throughput fit`)',
                )
            )
    meas = job.spec.rescale.measurement
    if meas is not None:
        mpath = loaded.resolve(meas)
        if root is not None and outside_root(mpath, root):
            out.append(
                (
                    "spec.rescale.measurement",
                    f"{mpath} is outside the models directory {root} (the platform's policy)",
                )
            )
        else:
            data, why = read_json_file(mpath)
            if why is not None:
                out.append(("spec.rescale.measurement", why))
            elif not isinstance(data, dict):
                out.append(("spec.rescale.measurement", f"{mpath} is not a JSON object"))
    return out


def validate_file(
    path: str | Path,
    *,
    check_files: bool = True,
    limits: JobLimits = DEFAULT_LIMITS,
    models_root: Path | None = None,
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """Validate one job file against ``limits`` (and, with ``check_files``, the files it names,
    inside ``models_root`` when one is given).

    Returns (job or None, error lines, warning lines); lines read ``FILE: path: reason``.
    """
    p = Path(path)
    data, problems = read_one_document(p)
    if problems:
        return None, [_line(str(path), loc, msg) for loc, msg in problems], []
    return validate_document(
        data,
        source=str(path),
        path=p,
        check_files=check_files,
        limits=limits,
        models_root=models_root,
    )


def validate_document(
    data: Any,
    *,
    source: str,
    path: Path,
    check_files: bool = True,
    limits: JobLimits = DEFAULT_LIMITS,
    models_root: Path | None = None,
) -> tuple[LoadedJob | None, list[str], list[str]]:
    """Validate one job document (read from ``source``; ``path`` stands for its file, beside
    which the files it names resolve). Returns (job or None, error lines, warning lines)."""
    job, problems = parse_job(data)
    if job is not None:
        problems += limit_problems(job, limits)
        if check_files:
            problems += file_problems(LoadedJob(job, path), root=models_root)
    errors = [_line(source, loc, msg) for loc, msg in problems]
    warnings = []
    if job is not None:
        warnings = [_line(source, loc, f"warning: {msg}") for loc, msg in advisories(job)]
    if job is not None and job.api_version in DEPRECATED_API_VERSIONS:
        warnings.append(
            _line(
                source,
                "apiVersion",
                f"warning: {job.api_version} is deprecated and no longer served by the CRD "
                f"(kubectl apply refuses it); write {API_VERSION} (the same schema)",
            )
        )
    return (LoadedJob(job, path) if job is not None and not errors else None), errors, warnings


def _line(file: str, loc: str, msg: str) -> str:
    if loc.startswith("(line "):
        return f"{file}:{loc[6:-1]}: {msg}"
    if loc.startswith("("):
        return f"{file}: {msg}"
    return f"{file}: {loc}: {msg}"


def load_job(path: str | Path, *, check_files: bool = True) -> LoadedJob:
    """Load a valid job or raise :class:`UserError` with one line per problem."""
    job, errors, _ = validate_file(path, check_files=check_files)
    if job is None:
        raise UserError(errors[0], problems=errors)
    return job
