"""The dry-run actuator: remembers and logs the size it would set, changes nothing.

Used for ``spec.target.kind: DryRun``, for ``kale controller --dry-run`` and ``kale plan``.
With a ``reader`` (a real actuator) it reports the target's actual size, so a dry run shows
what the controller would do to the live job; it never calls the reader's ``apply``.
"""

from __future__ import annotations

import logging

from autoscaler.actuators.base import Actuator, Size, fitted

log = logging.getLogger(__name__)


class DryRunActuator:
    """Logs resizes; ``current`` is the reader's size or the last size "applied"."""

    kind = "DryRun"

    def __init__(
        self, initial: Size | None = None, *, reader: Actuator | None = None, label: str = ""
    ) -> None:
        self.size = initial if initial is not None else Size(0, 0)
        self.reader = reader
        self.label = label
        self.applied: list[Size] = []

    def current(self) -> Size:
        if self.reader is not None:
            return self.reader.current()
        return self.size

    def fit(self, size: Size) -> Size:
        """What the reader's target would take (a dry run of a PyTorchJob shows its bounds)."""
        return fitted(self.reader, size) if self.reader is not None else size

    def apply(self, size: Size) -> Size:
        before = self.current()
        if before != size:
            log.info(
                "dry run%s: would resize %s -> %s",
                f" {self.label}" if self.label else "",
                before,
                size,
            )
            self.applied.append(size)
        self.size = size
        return size

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
