"""Reading one YAML document from a user's file, within bounds that make hostile files cheap.

Why not ``yaml.safe_load``: it is safe from code execution but not from cost or ambiguity.
A 1 MB flow list builds half a million nodes (tens of seconds and hundreds of megabytes in
pure Python; docs/decisions/0070-bounded-job-input-and-admission-policy.md), 500-deep nesting
ends in ``RecursionError``, a "billion laughs" of anchors and aliases is small on disk but
exponential for every later walk of the data (pydantic, ``json.dumps``), and a duplicated
key silently keeps the last value. Here a file is refused, with its line number, *before*
anything big is built:

1. the size is checked with ``stat`` and at most :attr:`DocumentLimits.max_bytes` are read;
2. the event stream (libyaml when present; it is iterative, so depth cannot overflow the
   stack) is scanned once, counting nesting depth and nodes *as expanded through aliases*,
   and stops at the first limit crossed;
3. only then is the document constructed, by a SafeLoader that refuses duplicate and
   non-string keys and strings with lone surrogates or NUL.

Every problem is a :class:`DocumentProblem` with a line (1-based) when there is one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_CLoader = getattr(yaml, "CSafeLoader", None)
_BaseLoader: Any = _CLoader or yaml.SafeLoader
_Parser: Any = getattr(yaml, "CParser", None)


@dataclass(frozen=True)
class DocumentLimits:
    """Bounds on one YAML file (defaults fit a job file hundreds of times over)."""

    max_bytes: int = 256 * 1024
    """A job is ~1 KB; Kubernetes itself caps an object at ~1.5 MB."""
    max_depth: int = 32
    """A job nests 5 deep (spec.source.kafka.bootstrapServers[0])."""
    max_nodes: int = 20_000
    """Scalars + collections after alias expansion (a job has ~60)."""
    max_scalar_chars: int = 256 * 1024
    """The longest single scalar (annotations may carry a JSON copy of the object)."""


DEFAULT_LIMITS = DocumentLimits()


@dataclass(frozen=True)
class DocumentProblem:
    """Why a file is not one usable YAML document; ``line`` is 1-based, or None."""

    message: str
    line: int | None = None


class _Refused(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def _line(mark: Any) -> int | None:
    return None if mark is None else int(mark.line) + 1


def _scan(text: str, limits: DocumentLimits) -> int:
    """Walk the events once; return the number of documents, or raise :class:`_Refused`."""
    depth = 0
    expanded = 0  # nodes so far, aliases counted as the size of what they point to
    sizes: dict[str, int] = {}
    open_at: list[tuple[str | None, int]] = []  # (anchor, `expanded` when it opened)
    documents = 0
    loader = yaml.SafeLoader(text) if _Parser is None else _Parser(text)
    try:
        while True:
            event = loader.get_event()
            if event is None:
                break
            line = _line(event.start_mark)
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor)
                if size is None:
                    raise _Refused(f"alias *{event.anchor} refers to no complete anchor", line)
                expanded += size
            elif isinstance(event, yaml.ScalarEvent):
                if len(event.value) > limits.max_scalar_chars:
                    raise _Refused(
                        f"a value of {len(event.value)} characters "
                        f"(at most {limits.max_scalar_chars} are accepted)",
                        line,
                    )
                expanded += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limits.max_depth:
                    raise _Refused(
                        f"nesting deeper than {limits.max_depth} levels "
                        "(a job needs 5): the document is refused",
                        line,
                    )
                expanded += 1
                open_at.append((event.anchor, expanded - 1))
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                anchor, start = open_at.pop()
                if anchor:
                    sizes[anchor] = expanded - start
            if expanded > limits.max_nodes:
                raise _Refused(
                    f"more than {limits.max_nodes} values (counting what aliases repeat); "
                    "a job has about 60, so the document is refused",
                    line,
                )
    finally:
        loader.dispose()
    return documents


class _StrictLoader(_BaseLoader):
    """SafeLoader that refuses duplicate keys, non-string keys and unencodable strings."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int | None] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = _line(key_node.start_mark)
                if not isinstance(key, str):
                    raise _Refused(
                        f"keys must be strings, got {type(key).__name__} {key!r} "
                        "(quote it: YAML reads on/yes/1 as booleans and numbers)",
                        line,
                    )
                if key in seen:
                    raise _Refused(f"duplicate key {key!r} (first on line {seen[key]})", line)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_scalar(self, node: Any) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and ("\x00" in value or _has_surrogate(value)):
            raise _Refused(
                "a string contains NUL or an invalid (surrogate) code point",
                _line(node.start_mark),
            )
        return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_text(path: Path, limits: DocumentLimits = DEFAULT_LIMITS) -> str:
    """The file as UTF-8 text; :class:`_Refused` (via :func:`load_file`) when it is not."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _Refused(f"cannot read: {exc.strerror or exc}", None) from None
    if not path.is_file():
        raise _Refused("is not a regular file", None)
    if size > limits.max_bytes:
        raise _Refused(f"is {size} bytes; at most {limits.max_bytes} are accepted", None)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limits.max_bytes + 1)
    except OSError as exc:
        raise _Refused(f"cannot read: {exc.strerror or exc}", None) from None
    if len(data) > limits.max_bytes:  # grew since stat
        raise _Refused(f"is over {limits.max_bytes} bytes", None)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _Refused(
            f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", line
        ) from None


def load_text(
    text: str, limits: DocumentLimits = DEFAULT_LIMITS
) -> tuple[list[Any], DocumentProblem | None]:
    """Every non-empty document in ``text``, or the first problem found."""
    try:
        if len(text) > limits.max_bytes:
            raise _Refused(f"is {len(text)} characters; at most {limits.max_bytes}", None)
        _scan(text, limits)
        loader = _StrictLoader(text)
        try:
            docs = []
            while loader.check_data():
                doc = loader.get_data()
                if doc is not None:
                    docs.append(doc)
        finally:
            loader.dispose()
    except _Refused as exc:
        return [], DocumentProblem(exc.message, exc.line)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = exc.problem or str(exc).splitlines()[0]
        return [], DocumentProblem(f"syntax error at {where}: {problem}")
    except yaml.YAMLError as exc:
        return [], DocumentProblem(f"syntax error: {str(exc).splitlines()[0]}")
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        # e.g. an integer of 5,000 digits (int() refuses it) or a malformed !!binary
        why = str(exc).split(":")[0][:120]
        return [], DocumentProblem(f"cannot be read as YAML ({type(exc).__name__}: {why})")
    return docs, None


def load_file(
    path: str | os.PathLike[str], limits: DocumentLimits = DEFAULT_LIMITS
) -> tuple[list[Any], DocumentProblem | None]:
    """Read and load a file within ``limits``: (documents, None) or ([], the problem)."""
    try:
        text = read_text(Path(path), limits)
    except _Refused as exc:
        return [], DocumentProblem(exc.message, exc.line)
    return load_text(text, limits)


Problem = tuple[str, str]
"""``(where, reason)``: a dotted field path, or ``(file)``/``(yaml)``/``(line N)``."""


def kind_of(value: Any) -> str:
    """How a message names what was given instead: ``mapping``, ``list`` or the type's name."""
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def read_one_document(
    path: Path, *, kind: str = "an ElasticTrainingJob"
) -> tuple[Any, list[Problem]]:
    """Read one YAML document within :data:`DEFAULT_LIMITS`.

    File problems come back as ``(file)``/``(yaml)`` problems, or ``(line N)`` when a line is
    known (printed ``FILE:N: reason``).
    """
    if not path.exists():
        return None, [("(file)", "file not found")]
    if path.is_dir():
        return None, [("(file)", "is a directory, expected a YAML file")]
    docs, problem = load_file(path)
    if problem is not None:
        where = f"(line {problem.line})" if problem.line is not None else "(yaml)"
        return None, [(where, problem.message)]
    if not docs:
        try:
            empty = path.stat().st_size == 0 or not path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            empty = False
        if empty:
            return None, [("(file)", f"empty file, expected {kind}")]
        return None, [("(file)", "contains no YAML document")]
    if len(docs) > 1:
        return None, [
            (
                "(file)",
                f"contains {len(docs)} YAML documents; put one {kind.split()[-1]} in each file",
            )
        ]
    return docs[0], []
