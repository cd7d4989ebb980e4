"""Frozen dataclasses that cost a plain one's to make.

A frozen dataclass's generated ``__init__`` sets each field through
``object.__setattr__`` (its own ``__setattr__`` refuses), a call per field: making one
costs several times what a plain dataclass costs. The controller makes a handful of them
per job per tick (observations, plans, decisions, forecast windows), so at thousands of jobs
that call was a visible share of a tick. :func:`quick_init` gives such a class an
``__init__`` that fills the instance's ``__dict__`` directly: the same parameters, defaults,
default factories and ``__post_init__``, and the instance stays frozen (assigning a field
still raises :class:`dataclasses.FrozenInstanceError`).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")

_FACTORY = object()
"""The default of a parameter whose field has a ``default_factory``."""


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of the frozen dataclass ``cls`` (applied above
    ``@dataclass(frozen=True)``) by one that writes the instance's ``__dict__``.

    For classes without ``__slots__`` and without keyword-only fields or ``InitVar``s
    (refused: their ``__init__`` is left to :mod:`dataclasses`).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} has __slots__: no __dict__ to fill")
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    args: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: keyword-only fields are not supported")
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            names[f"_default_{f.name}"] = f.default
        if has_factory:
            names[f"_factory_{f.name}"] = f.default_factory
        if not f.init:
            if has_default:
                body.append(f"_qd_[{f.name!r}] = _default_{f.name}")
            elif has_factory:
                body.append(f"_qd_[{f.name!r}] = _factory_{f.name}()")
            continue
        if has_default:
            args.append(f"{f.name}=_default_{f.name}")
        elif has_factory:
            args.append(f"{f.name}=_FACTORY")
        else:
            args.append(f.name)
        if has_factory:
            body.append(
                f"_qd_[{f.name!r}] = _factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
            )
        else:
            body.append(f"_qd_[{f.name!r}] = {f.name}")
    given = [a.partition("=")[0] for a in args]
    expected = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    if given != expected or "_qd_" in given:  # an InitVar, or a name of ours
        raise TypeError(f"{cls.__name__}: its fields are not plain ones ({expected})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    lines = "\n".join(f"    {line}" for line in ["_qd_ = self.__dict__", *body])
    source = f"def __init__(self, {', '.join(args)}) -> None:\n{lines}\n"
    exec(source, names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
