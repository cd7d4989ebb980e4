"""Forecasts for simulated runs: the one forecast feed driven synchronously, and a fit cache.

The planner sees forecasts through :class:`FeedSource`, the simulator's wrapper of
:class:`autoscaler.policy.feed.ForecastFeed` (the controller wraps the same feed), fed only
the arrivals before each decision step: refits on the job's schedule (``spec.forecast.refit``,
default daily, and early while the history is young), its quantile, the same context window.
Fitting a transformer two dozen times per run is the expensive part of a simulation, so fitted
models are cached on disk, keyed by the model, its options, the exact history it was fitted on
and the forecasting code itself: a second run of the same comparison fits nothing, and a
changed model never reuses a fit of the old one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.policy.feed import (
    FeedSettings,
    FitHook,
    ForecastFeed,
    History,
    fit_model,
    refresh,
)
from autoscaler.policy.forecasts import ForecastWindow

log = logging.getLogger(__name__)

OnFit = Callable[[str, int], AbstractContextManager[Any]]
"""Wraps one real fit: ``with on_fit(model name, history steps): ...``."""


def default_cache_dir() -> Path:
    """``$KALE_CACHE_DIR`` or ``~/.cache/kale``, with a ``fits`` folder."""
    base = os.environ.get("KALE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kale"
    )
    return Path(base) / "fits"


def source_digest(root: Path) -> str:
    """A digest of the names and contents of the ``.py`` files under ``root``."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def forecasting_code_digest() -> str:
    """The :func:`source_digest` of the ``forecasting`` package.

    Part of every cache key: without it, a simulation after a change to a model (a new
    decomposition step, say) would silently load fits made by the old code.
    """
    import forecasting

    return source_digest(Path(forecasting.__file__).parent)


def _key(model: str, options: dict[str, Any], series: pd.Series, parent: str | None = None) -> str:
    h = hashlib.sha256()
    h.update(forecasting_code_digest().encode())
    h.update(json.dumps({"model": model, "options": options}, sort_keys=True, default=str).encode())
    h.update(str(series.index[0]).encode())
    h.update(str(series.index.freq or "").encode())
    h.update(np.ascontiguousarray(series.to_numpy(dtype=float)).tobytes())
    if parent is not None:  # a refit that starts from an earlier fit: that fit's key too
        h.update(b"parent:" + parent.encode())
    return h.hexdigest()[:32]


def cached_fit(
    cache_dir: Path | None,
    model: str,
    options: dict[str, Any],
    *,
    on_fit: OnFit | None = None,
    label: str | None = None,
) -> FitHook:
    """A ``fit_cache`` hook: load a fit of the same model on the same history, or fit and save.

    A refit that starts from an earlier fit (``previous``, see
    :func:`autoscaler.policy.feed.fit_model`) is keyed by that fit's key too, so a cached
    refit is only reused after the same chain of fits, and a run is the same whether its
    fits came from the cache or not. A ``previous`` this hook did not fit or load (its key
    unknown) is not started from: the fit is a full one.

    ``on_fit(label, steps)`` wraps each real fit (not a cache hit): a fit can take minutes,
    and the CLI shows it moving (or logs a line per fit when stderr is not a terminal).
    """
    shown = label or model
    keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def really_fit(forecaster: Any, series: pd.Series, previous: Any) -> Any:
        if on_fit is None:
            return fit_model(forecaster, series, previous)
        with on_fit(shown, len(series)):
            return fit_model(forecaster, series, previous)

    def fit(forecaster: Any, series: pd.Series, previous: Any = None) -> Any:
        parent = keys.get(previous) if previous is not None else None
        if parent is None:
            previous = None
        key = _key(model, options, series, parent)
        fitted = forecaster
        if cache_dir is None or not hasattr(forecaster, "save"):
            fitted = really_fit(forecaster, series, previous) or forecaster
            keys[fitted] = key
            return fitted
        path = cache_dir / f"{model}-{key}.fit"
        if path.exists():
            try:
                fitted = type(forecaster).load(path)
                keys[fitted] = key
                return fitted
            except Exception as exc:  # a stale or foreign cache entry: refit
                log.warning("ignoring fit cache %s: %s", path, exc)
        really_fit(forecaster, series, previous)
        keys[forecaster] = key
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            forecaster.save(path)
        except OSError as exc:
            log.warning("cannot write fit cache %s: %s", path, exc)
        return forecaster

    return fit


class FeedSource:
    """A :class:`~autoscaler.policy.forecasts.ForecastSource` over the forecast feed.

    Step ``t`` of the run is grid step ``round(start / Δ) + t`` of the feed (the trace's
    calendar, which seasonal models read). Due fits happen inside :meth:`window`. One source
    serves every policy of a job that forecasts (kale, madu): the feed remembers its fits and
    forecasts, so a second policy sees exactly the windows the first one did at the same steps.
    """

    def __init__(
        self,
        make: Callable[[], Any],
        *,
        settings: FeedSettings,
        start: Any,
        fit: FitHook | None = None,
        name: str = "forecast",
    ) -> None:
        stamp = pd.Timestamp(start)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
        self.start_s = stamp.timestamp()
        self.make = make
        self.fit = fit
        self.feed = ForecastFeed(settings, name=name)
        self.name = name

    @property
    def failures(self) -> int:
        return self.feed.failures

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        history = History(self.start_s, self.feed.settings.interval_s, past[:step])
        at = history.start_step + step
        refresh(self.feed, history, at, self.make, fit=self.fit)
        w = self.feed.window(history, at)
        if w is None or len(w) < horizon:
            return None
        return w if len(w) == horizon else w.head(horizon)


def source_factory(
    model: str,
    *,
    start: Any,
    interval_s: float,
    horizon_steps: int,
    refit_s: float | None = 86400.0,
    quantile: float = 0.9,
    predict_every: int = 10,
    cache_dir: Path | None = None,
    seed: int = 0,
    options: dict[str, Any] | None = None,
    on_fit: OnFit | None = None,
) -> Callable[[], FeedSource]:
    """A zero-argument factory of forecast sources (what the policy registry expects).

    The model runs inside the fallback wrapper, so a history too short for it (or a failed
    fit) falls back to seasonal naive and says why instead of stopping the simulation.
    """
    from forecasting.registry import make_forecaster

    opts = {"horizon": horizon_steps + predict_every, "seed": seed, **(options or {})}
    settings = FeedSettings(
        interval_s=interval_s,
        horizon_steps=horizon_steps,
        refit_s=refit_s,
        quantile=quantile,
        predict_every=predict_every,
    )

    def make() -> Any:
        if model == "seasonal_naive":
            return make_forecaster("fallback", primary="seasonal_naive", secondary="seasonal_naive")
        return make_forecaster("fallback", primary=model, **opts)

    def factory() -> FeedSource:
        return FeedSource(
            make,
            settings=settings,
            start=start,
            fit=cached_fit(cache_dir, f"fallback-{model}", opts, on_fit=on_fit, label=model),
            name=model,
        )

    return factory
