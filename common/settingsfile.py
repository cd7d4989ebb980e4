"""The daemons' settings files (``controller.yaml``, ``scheduler.yaml``): one set of rules.

Why a module of its own: both files are read the same way — camelCase keys, unknown keys
are errors, every problem one line ``FILE: field.path: reason`` (``FILE:LINE: reason`` when a
YAML line is known), a missing file is an error, relative paths resolve against the file —
so the code that says so lives once, here, for the controller and the scheduler alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from common.errors import UserError
from common.yamldoc import read_one_document


class SettingsModel(BaseModel):
    """Base of every section: camelCase keys, unknown keys are errors, immutable once read."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


M = TypeVar("M", bound=SettingsModel)

_MESSAGES = {"extra_forbidden": "unknown field", "missing": "required field is missing"}


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(root)"


def validate_settings(model: type[M], data: Any, *, source: str) -> M:
    """``data`` as a ``model``; :class:`UserError` with one line per problem otherwise."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping (a {model.__name__})")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            msg = _MESSAGES.get(err["type"], err["msg"]).removeprefix("Value error, ")
            lines.append(f"{source}: {_field_path(err['loc'])}: {msg}")
        raise UserError(lines[0], problems=lines) from None


def read_settings(path: Path, model: type[M]) -> M:
    """Read and validate one settings file (paths in it are not resolved yet)."""
    data, problems = read_one_document(path, kind=f"a {model.__name__}")
    if problems:
        lines = [
            f"{path}:{loc[6:-1]}: {msg}" if loc.startswith("(line ") else f"{path}: {msg}"
            for loc, msg in problems
        ]
        raise UserError(lines[0], problems=lines)
    return validate_settings(model, data, source=str(path))


def resolve_path(base: Path, value: str | None) -> str | None:
    """``value`` relative to ``base`` unless absolute (``~`` expanded; None stays None)."""
    if value is None:
        return None
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)
