"""common.frozen.quick_init: the same dataclass, made without a setattr call per field."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import InitVar, dataclass, field

import pytest

from common.frozen import quick_init


@quick_init
@dataclass(frozen=True)
class Point:
    x: int
    y: int = 2
    tags: list[str] = field(default_factory=list)
    seen: int = field(default=7, init=False)

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x < 0")


@quick_init
@dataclass(frozen=True)
class Tagless:
    x: int


@dataclass(frozen=True)
class Plain:
    x: int
    y: int = 2
    tags: list[str] = field(default_factory=list)
    seen: int = field(default=7, init=False)


def test_it_makes_what_the_generated_init_makes():
    pairs = [
        (Point(1), Plain(1)),
        (Point(1, 3), Plain(1, 3)),
        (Point(x=4, tags=["a"]), Plain(x=4, tags=["a"])),
    ]
    for quick, plain in pairs:
        assert dataclasses.asdict(quick) == dataclasses.asdict(plain)
        assert quick == Point(**{k: v for k, v in vars(quick).items() if k != "seen"})
    assert hash(Tagless(1)) == hash(Tagless(1)) and Tagless(1) != Tagless(2)
    assert Point(1).tags is not Point(1).tags  # a fresh default each time
    assert Point(1).seen == 7
    assert dataclasses.replace(Point(1, 5), y=6) == Point(1, 6)
    assert pickle.loads(pickle.dumps(Point(1, tags=["t"]))) == Point(1, tags=["t"])
    with pytest.raises(ValueError, match="x < 0"):
        Point(-1)  # __post_init__ still runs
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, [], 4)  # type: ignore[call-arg]


def test_the_instance_stays_frozen():
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]


def test_what_it_cannot_copy_is_refused():
    with pytest.raises(TypeError, match="not a frozen dataclass"):
        quick_init(dataclass(type("Open", (), {"__annotations__": {"x": int}})))

    @dataclass(frozen=True)
    class WithInitVar:
        x: int
        scale: InitVar[int] = 1

    with pytest.raises(TypeError, match="not plain"):
        quick_init(WithInitVar)

    @dataclass(frozen=True, kw_only=True)
    class KeywordOnly:
        x: int

    with pytest.raises(TypeError, match="keyword-only"):
        quick_init(KeywordOnly)

    @dataclass(frozen=True, slots=True)
    class Slotted:
        x: int

    with pytest.raises(TypeError, match="__slots__"):
        quick_init(Slotted)
