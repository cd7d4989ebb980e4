"""Errors of the placement package.

The CLI maps :class:`PlacementInputError` to exit code 2 with its one-line message; anything
else escaping the package is a bug (exit 1).
"""

from __future__ import annotations


class PlacementError(Exception):
    """Root of every error the placement package raises on purpose."""


class PlacementInputError(PlacementError):
    """Bad input a user can fix: a malformed row, an unknown policy name, a bad setting.

    The message names where the problem is (``FILE:LINE: reason`` for data files).
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line
