"""What can go wrong when Kale changes a job's size, sorted the way the controller reacts.

Kept free of the ``kubernetes`` import so the controller can catch these without knowing
which actuator raised them (kopf's habit: errors are sorted into *retry* and *escalate*):

* :class:`TargetGone` — the object is not there (HTTP 404). For the job's own custom
  resource the controller forgets the job; for its StatefulSet/TFJob it holds and reports.
* :class:`TargetUnavailable` — the API server stayed unreachable or kept answering
  429/5xx after the backoff ran out. Transient: the next tick tries again.
* :class:`Conflict` — optimistic concurrency kept failing (409) after re-reading.
* :class:`TargetRejected` — the request itself is wrong or forbidden (400/401/403/422):
  retrying cannot help, a person must look (RBAC, schema).
"""

from __future__ import annotations

from common.errors import KaleError


class ActuatorError(KaleError):
    """Root of the errors actuators raise on purpose."""

    transient = False
    """Whether trying again on the next tick may succeed without anyone's help."""


class TargetGone(ActuatorError):
    """The object does not exist (HTTP 404)."""


class TargetUnavailable(ActuatorError):
    """The API server or process host kept failing after retries (connection, 429, 5xx)."""

    transient = True


class Conflict(ActuatorError):
    """Writes kept losing the optimistic-concurrency race (HTTP 409) after re-reads."""

    transient = True


class TargetRejected(ActuatorError):
    """The API server refused the request for a reason retrying cannot fix."""
