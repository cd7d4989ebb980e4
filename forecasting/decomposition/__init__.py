"""Decomposition of a traffic history into trend, seasonal profile and residual.

Modules, in the order a fit uses them:

* :mod:`.stl` — STL/MSTL with the fast settings (the only statsmodels decomposition call);
* :mod:`.clock` — daylight-saving clock changes found in a UTC trace and undone;
* :mod:`.outliers` — outages, spikes and holidays told apart from ordinary traffic;
* :mod:`.trend` — the trend of the history with both of those cleaned out;
* :mod:`.daytypes` — weekends told apart in histories too short for a weekly season;
* :mod:`.selection` — how fast the profile forgets old weeks;
* :mod:`.profile` — the seasonal profile, a lookup table by phase;
* :mod:`.phases` — per-phase statistics shared by all of them.

Why each step exists, and what was measured, is in ``docs/decisions/`` (0001-0006) and
``docs/forecasting.md``.
"""

from forecasting.decomposition.clock import ClockChange, find_clock_change
from forecasting.decomposition.daytypes import DayTypes, choose_day_types
from forecasting.decomposition.profile import SeasonalProfile, estimate_profile
from forecasting.decomposition.selection import choose_half_life
from forecasting.decomposition.stl import Decomposition, decompose
from forecasting.decomposition.trend import RobustTrend, robust_trend

__all__ = [
    "ClockChange",
    "DayTypes",
    "Decomposition",
    "RobustTrend",
    "SeasonalProfile",
    "choose_day_types",
    "choose_half_life",
    "decompose",
    "estimate_profile",
    "find_clock_change",
    "robust_trend",
]
