"""``kale validate``: check job files and the daemons' settings before they reach a cluster.

What people feed it is whatever they are about to apply: one job file, a directory of them,
or ``kubectl kustomize … | kale validate -`` — a stream of many documents of many kinds. Each
document is checked by its ``kind``: an ``ElasticTrainingJob`` as the controller admits it, a
``ControllerConfig`` or ``SchedulerConfig`` as the daemons read them; a ConfigMap whose data
holds one of those (how the manifests ship ``controller.yaml``) has that key checked; a
``List`` has its items checked; documents of other kinds are counted and skipped. A document
with no ``kind`` is taken for a job, so its problems read as a job's.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from common.errors import UserError
from common.yamldoc import load_file, load_text

CONFIG_KINDS = ("ControllerConfig", "SchedulerConfig")
JOB_KIND = "ElasticTrainingJob"
YAML_SUFFIXES = (".yaml", ".yml")

JobCheck = Callable[[Any, str, Path], tuple[Any, list[str], list[str]]]
"""(document, source, path) → (loaded job or None, error lines, warning lines)."""


@dataclass
class Outcome:
    """What validating every input found."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Per input: documents of other kinds, not Kale's."""
    checked: int = 0


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option(
    "--no-file-checks",
    is_flag=True,
    help="Skip checking that referenced files (throughput model) exist.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(),
    default=None,
    help="A controller.yaml: also apply its platform policy (in cluster mode: allowed target "
    "kinds, Kafka hosts, models directory, limits).",
)
def validate(
    files: tuple[str, ...], no_file_checks: bool, quiet: bool, config_path: str | None
) -> None:
    """Validate FILES: ElasticTrainingJob, ControllerConfig and SchedulerConfig documents.

    A FILE may hold several documents (``---``), be a directory (its ``*.yaml``/``*.yml``
    files, recursively) or ``-`` (standard input: ``kubectl kustomize DIR | kale validate -``).
    Documents of other kinds are skipped; ConfigMaps holding a ``controller.yaml`` or
    ``scheduler.yaml`` have it checked.

    Exit 0 when all are valid; otherwise exit 2 with one line per problem on stderr:
    ``FILE: dotted.field.path: reason`` (``FILE (document N): …`` in a multi-document file).
    """
    check = _job_check(no_file_checks, config_path)
    out = Outcome()
    for name in files:
        for source, text_or_path in _inputs(name):
            _validate_input(source, text_or_path, check, out)
    for line in out.warnings:
        click.echo(line, err=True)
    if not quiet:
        for line in out.ok:
            click.echo(line)
        for source, n in out.skipped.items():
            click.echo(f"{source}: {n} document{'s' if n > 1 else ''} of other kinds skipped")
    if out.errors:
        raise UserError(out.errors[0], problems=out.errors)
    if out.checked == 0:
        raise UserError(
            f"{', '.join(files)}: no {JOB_KIND}, ControllerConfig or SchedulerConfig to validate"
        )


def _job_check(no_file_checks: bool, config_path: str | None) -> JobCheck:
    """How each job document is checked: alone, or against a controller.yaml's policy."""
    from autoscaler.job.loading import validate_document

    if config_path is None:

        def plain(data: Any, source: str, path: Path) -> tuple[Any, list[str], list[str]]:
            return validate_document(data, source=source, path=path, check_files=not no_file_checks)

        return plain
    from autoscaler.controller.config import load_controller_config
    from autoscaler.job.admission import check_document

    cfg = load_controller_config(config_path)
    policy = dataclasses.replace(cfg.admission_policy(), check_files=not no_file_checks)
    models = cfg.jobs.models_dir if cfg.cluster_mode else None

    def admitted(data: Any, source: str, path: Path) -> tuple[Any, list[str], list[str]]:
        return check_document(data, policy, source=source, path=path, models_dir=models)

    return admitted


def _inputs(name: str) -> Iterator[tuple[str, str | Path]]:
    """(source name, stdin text or file path) for each input ``name`` stands for."""
    if name == "-":
        yield "<stdin>", sys.stdin.read()
        return
    path = Path(name)
    if path.is_dir():
        found = sorted(
            p
            for p in path.rglob("*")
            if p.suffix in YAML_SUFFIXES
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not found:
            raise UserError(f"{name}: no *.yaml or *.yml files in this directory")
        for p in found:
            yield str(p), p
        return
    yield name, path


def _validate_input(source: str, text_or_path: str | Path, check: JobCheck, out: Outcome) -> None:
    """Every document of one input, each by its kind."""
    if isinstance(text_or_path, Path) and not text_or_path.exists():
        out.errors.append(f"{source}: file not found")
        return
    if isinstance(text_or_path, str):
        docs, problem = load_text(text_or_path)
        base = Path.cwd() / "stdin.yaml"  # files a job names resolve from the working directory
    else:
        docs, problem = load_file(text_or_path)
        base = text_or_path
    if problem is not None:
        where = f"{source}:{problem.line}" if problem.line is not None else source
        out.errors.append(f"{where}: {problem.message}")
        return
    if not docs:
        text = text_or_path if isinstance(text_or_path, str) else _text(text_or_path)
        what = "empty file" if not text.strip() else "contains no YAML document"
        out.errors.append(f"{source}: {what}, expected an {JOB_KIND} (or a Kale config)")
        return
    for k, doc in enumerate(docs, start=1):
        name = source if len(docs) == 1 else f"{source} (document {k})"
        _validate_document(doc, name, base, check, out, source)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _validate_document(
    doc: Any, name: str, base: Path, check: JobCheck, out: Outcome, source: str
) -> None:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind is None or kind == JOB_KIND:
        job, errors, warnings = check(doc, name, base)
        out.checked += 1
        out.errors += errors
        out.warnings += warnings
        if job is not None:
            out.ok.append(f"{name}: ok ({job.job.kind} {job.job.metadata.namespace}/{job.name})")
    elif kind in CONFIG_KINDS:
        _validate_settings(doc, kind, name, out)
    elif kind == "List" and isinstance(doc.get("items"), list):
        for k, item in enumerate(doc["items"], start=1):
            _validate_document(item, f"{name} (item {k})", base, check, out, source)
    elif kind == "ConfigMap" and _settings_in(doc):
        meta = doc.get("metadata") or {}
        where = f"ConfigMap {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
        for key, (inner_kind, inner) in _settings_in(doc).items():
            _validate_settings(inner, inner_kind, f"{name} ({where}, {key})", out)
    else:
        out.skipped[source] = out.skipped.get(source, 0) + 1


def _settings_in(doc: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """The ConfigMap's data keys that hold a ControllerConfig or SchedulerConfig."""
    found: dict[str, tuple[str, Any]] = {}
    data = doc.get("data")
    if not isinstance(data, dict):
        return found
    for key, value in data.items():
        if not isinstance(value, str) or not str(key).endswith(YAML_SUFFIXES):
            continue
        inner, problem = load_text(value)
        if problem is None and len(inner) == 1 and isinstance(inner[0], dict):
            kind = inner[0].get("kind")
            if kind in CONFIG_KINDS:
                found[str(key)] = (kind, inner[0])
    return found


def _validate_settings(doc: dict[str, Any], kind: str, name: str, out: Outcome) -> None:
    """A ControllerConfig or SchedulerConfig, as its daemon would read it."""
    out.checked += 1
    try:
        if kind == "ControllerConfig":
            from autoscaler.controller.config import parse_controller_config

            parse_controller_config(doc, source=name)
        else:
            from scheduler.config import parse_scheduler_config

            parse_scheduler_config(doc, source=name)
    except UserError as exc:
        out.errors += exc.problems
        return
    out.ok.append(f"{name}: ok ({kind})")
