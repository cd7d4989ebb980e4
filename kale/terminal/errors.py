"""Turning a library's "you gave me something wrong" into the CLI's one-line user error.

Leaf packages and sources raise their own error types (they must not import the CLI); a
command says which of them are the user's to fix, and they become :class:`UserError`
(exit 2, one line, no traceback). Anything else stays an internal error (exit 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from common.errors import UserError


@contextlib.contextmanager
def user_errors(*types: type[BaseException], prefix: str = "") -> Iterator[None]:
    """Re-raise ``types`` as :class:`UserError` (``prefix`` + the message), without chaining."""
    try:
        yield
    except types as exc:
        raise UserError(f"{prefix}{exc}") from None
