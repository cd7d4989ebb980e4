"""Shared helpers of the scheduler tests: the fake API server with pods and nodes.

Re-exported from here (like ``controller_fakes``) so that the tests find the fake whether
pytest runs from the repository root or not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.kube_api import FakeKubeApi  # noqa: E402
from tests.fakes.kube_core import node_doc, pod_doc  # noqa: E402

__all__ = ["ROOT", "FakeKubeApi", "node_doc", "pod_doc", "wait_for"]


def wait_for(condition: Callable[[], object], *, timeout: float = 20.0, what: str = "") -> object:
    """Poll ``condition`` until it is truthy; fail after ``timeout`` (generous: loaded CI)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.01)
