"""One root error type for everything a user can get wrong.

The CLI maps :class:`UserError` to exit code 2 with a one-line message and no traceback;
anything else that escapes is an internal error (exit 1). Library callers catch
:class:`KaleError` to handle every Kale failure in one place.
"""

from __future__ import annotations


class KaleError(Exception):
    """Root of every error Kale raises on purpose."""


class UserError(KaleError):
    """A mistake the user can fix: bad file, bad flag, invalid config.

    ``problems`` holds one line per problem (``FILE: dotted.path: reason``) when there are
    several; ``str(err)`` is always a printable summary.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = problems if problems is not None else [message]
        # Lines already in `FILE: path: reason` form are printed without a "kale: error:" prefix.
        self.bare = problems is not None


class MetricUnavailable(KaleError):
    """A metric source (Kafka) could not answer in time.

    The controller treats this as "hold the current size" — never as a zero load.
    """
