"""Worker estimator: fitted parameter-server throughput models and the minimum-worker solver.

A leaf package (numpy/scipy only; never imports ``autoscaler``, torch or ``forecasting``):

* :mod:`throughput.profile`  — profiling samples, CSV in and out with FILE:LINE errors;
* :mod:`throughput.families` — the PS step-time families of docs/design.md, plus linear and Optimus;
* :mod:`throughput.fit`      — NNLS + bounded least squares, k-fold family selection;
* :mod:`throughput.model`    — the fitted model: f(w, p), its peak, JSON persistence;
* :mod:`throughput.solver`   — smallest w with f(w, ceil(w/ratio)) > load;
* :mod:`throughput.simulate` — a physical PS simulation for profiles with known truth.
"""

from throughput.errors import (
    ExtrapolationWarning,
    FitError,
    ModelFileError,
    ProfileError,
    ThroughputError,
)
from throughput.fit import compare_families, fit_model
from throughput.model import ThroughputModel
from throughput.profile import Profile, load_points, load_profile, save_profile
from throughput.solver import Plan, needed_rate, plan

__all__ = [
    "ExtrapolationWarning",
    "FitError",
    "ModelFileError",
    "Plan",
    "Profile",
    "ProfileError",
    "ThroughputError",
    "ThroughputModel",
    "compare_families",
    "fit_model",
    "load_points",
    "load_profile",
    "needed_rate",
    "plan",
    "save_profile",
]
