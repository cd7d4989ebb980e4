"""Shared helpers of the scheduler tests: the fake API server with pods and nodes.

The fake API server is re-exported from here (like :mod:`tests.support.controller_fakes`):
every scheduler test needs it with the pod and node documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.support.kube_api import FakeKubeApi
from tests.support.kube_core import node_doc, pod_doc
from tests.support.kube_objects import pdb_doc, priority_class_doc

ROOT = Path(__file__).resolve().parents[2]

__all__ = [
    "ROOT",
    "FakeKubeApi",
    "node_doc",
    "pdb_doc",
    "pod_doc",
    "priority_class_doc",
    "wait_for",
]


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
