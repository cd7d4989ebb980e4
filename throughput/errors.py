"""Errors of the throughput package.

``throughput`` is a leaf: it must not import ``autoscaler``, so it cannot raise the CLI's
``UserError``. It raises these instead; every one is a ``ValueError`` (the caller handed us
something wrong) whose message already names the file and line where there is one, so the
CLI can turn it into a one-line user error without rewording it.
"""

from __future__ import annotations


class ThroughputError(ValueError):
    """Root of every error this package raises on purpose."""


class ProfileError(ThroughputError):
    """A profile or points CSV could not be read: ``FILE:LINE: reason``."""


class ModelFileError(ThroughputError):
    """A saved model file is missing, not JSON, of another format, or inconsistent."""


class FitError(ThroughputError):
    """The profile cannot support the requested fit (too few configurations, no rows…)."""


class ExtrapolationWarning(UserWarning):
    """A prediction was asked far outside the profiled range of workers.

    The fitted families are physical, so they extrapolate better than a polynomial would, but
    nothing was measured there: the warning tells the user to profile that range.
    """
