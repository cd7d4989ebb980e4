"""Model names → forecaster classes, so the CLI, backtests and saved files share one table.

``kale`` is imported only when asked for: it is the one model that needs torch, and the
baselines (and everything that only uses them) must not pay for importing it.
"""

from __future__ import annotations

import importlib
from typing import Any

from forecasting.base import Forecaster

_CLASSES: dict[str, str] = {
    "kale": "forecasting.transformer.forecaster:KaleForecaster",
    "seasonal_naive": "forecasting.naive:SeasonalNaive",
    "ets": "forecasting.ets:ETS",
    "stl_ets": "forecasting.ets:STLETS",
    "dlinear": "forecasting.dlinear:DLinear",
    "fallback": "forecasting.fallback:FallbackForecaster",
}

MODEL_NAMES: tuple[str, ...] = ("kale", "seasonal_naive", "ets", "stl_ets", "dlinear")
"""The forecasting models (``fallback`` wraps one of them and is listed separately)."""

ALL_NAMES: tuple[str, ...] = (*MODEL_NAMES, "fallback")

# Models that train for a fixed horizon and take it as a constructor argument.
_HORIZON_AWARE = {"kale", "dlinear"}


def forecaster_class(name: str) -> type[Forecaster]:
    try:
        target = _CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r} (choose from {', '.join(ALL_NAMES)})") from None
    module, attr = target.split(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root != "torch":
            raise
        # The core install has no torch; say which install brings it, in one line.
        raise ModuleNotFoundError(
            f"torch is not installed; the {name!r} forecaster needs it: run "
            "`pip install 'kale-autoscaler[transformer]'` (or pick seasonal_naive, ets, "
            "stl_ets or dlinear)",
            name=exc.name,
        ) from None
    return getattr(loaded, attr)


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
