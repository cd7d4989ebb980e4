"""Building a forecaster by name, so the CLI, backtests and the controller share one set of
flags: which names there are and which options each model takes.

The name → class table itself is :data:`forecasting.base.IMPLEMENTATIONS` (loading a saved
file needs it too); ``kale`` is imported only when asked for: it is the one model that
needs torch, and the baselines (and everything that only uses them) must not pay for it.
"""

from __future__ import annotations

from typing import Any

from forecasting.base import IMPLEMENTATIONS, Forecaster, forecaster_class

ALL_NAMES: tuple[str, ...] = tuple(IMPLEMENTATIONS)
"""Every model, ``fallback`` (which wraps one of the others) last."""

MODEL_NAMES: tuple[str, ...] = tuple(n for n in ALL_NAMES if n != "fallback")
"""The forecasting models (``fallback`` wraps one of them and is listed separately)."""

# Models that train for a fixed horizon and take it as a constructor argument.
_HORIZON_AWARE = {"kale", "dlinear"}


def _applicable(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if name not in _HORIZON_AWARE:
        out.pop("horizon", None)
    if name != "kale":
        for key in _KALE_ONLY:
            out.pop(key, None)
    return out


_KALE_ONLY = ("device", "seed", "threads", "time_budget_s", "epochs", "progress", "members")


def make_forecaster(name: str, **kwargs: Any) -> Forecaster:
    """A fresh, unfitted forecaster.

    Options that apply only to some models (``horizon``, ``device``, ``seed``…) are dropped for
    the others, so one set of flags can build every model. For ``fallback`` they go to the
    primary (``primary="kale"`` by default).
    """
    cls = forecaster_class(name)
    if name == "fallback":
        own = {
            k: kwargs.pop(k)
            for k in ("primary", "secondary", "primary_kwargs", "refit_every", "max_context_days")
            if k in kwargs
        }
        primary = own.get("primary", "kale")
        if isinstance(primary, str):
            own["primary_kwargs"] = {
                **_applicable(primary, kwargs),
                **own.get("primary_kwargs", {}),
            }
        return cls(**own)
    return cls(**_applicable(name, kwargs))
