"""Every scheduler test ends with its threads: no watch, lease or event writer outlives it.

A thread left running keeps watching a fake API server that is gone and logs into streams
pytest has closed; worse, it may still bind pods of the next test. The fixture stops any
replica a failed test left behind, then fails the test whose ``kale-*`` threads survive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from scheduler_harness import stop_all

GRACE_S = 15.0
"""How long stopped threads may take to end (a loaded 2-core machine is slow, not stuck)."""


def _kale_threads(exclude: set[threading.Thread]) -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("kale") and t.is_alive() and t not in exclude
    ]


@pytest.fixture(autouse=True)
def no_kale_threads_survive() -> Iterator[None]:
    before = set(_kale_threads(set()))
    yield
    stop_all()
    deadline = time.monotonic() + GRACE_S
    while (left := _kale_threads(before)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not left, f"threads left running: {sorted(t.name for t in left)}"
