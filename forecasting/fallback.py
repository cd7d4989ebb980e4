"""A wrapper that switches to a simpler model when the primary cannot do the job, and says why.

The primary is skipped when the history is shorter than it needs (two days for the models
that learn daily patterns) and dropped when its ``fit`` raises; a ``predict`` that raises
falls back for that call. The secondary (seasonal naive by default, which itself copies the
last value when not even a day is there) is always fitted too, so the switch is instant. The
reason goes to ``fit_summary["reason"]`` and to the log.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from forecasting.base import Forecaster, Payload
from forecasting.registry import make_forecaster

log = logging.getLogger(__name__)

FALLBACK_MIN_HISTORY = pd.Timedelta(days=2)
"""Below this the primary is not even tried (less than two days of history)."""


class FallbackForecaster(Forecaster):
    """``primary`` when it can, else ``secondary``; ``fit_summary`` says which and why."""

    name = "fallback"

    def __init__(
        self,
        *,
        primary: Forecaster | str = "kale",
        secondary: Forecaster | str = "seasonal_naive",
        primary_kwargs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        p_name = primary if isinstance(primary, str) else primary.name
        s_name = secondary if isinstance(secondary, str) else secondary.name
        pk = dict(primary_kwargs or {})
        if not isinstance(primary, str):
            pk = {**primary.params, **pk}
        super().__init__(primary=p_name, secondary=s_name, primary_kwargs=pk, **kw)
        self.primary = primary if not isinstance(primary, str) else make_forecaster(p_name, **pk)
        self.secondary = secondary if not isinstance(secondary, str) else make_forecaster(s_name)
        self.use_primary = False
        self.last_reason: str | None = None

    @property
    def supports_gpu(self) -> bool:
        return self.primary.supports_gpu

    def _fit(self, series: pd.Series) -> None:
        self._fit_from(series, None)

    def _refit_state(self) -> Forecaster | None:
        # The primary starts from its last fit (the secondary is cheap and fits in full); a
        # wrapper that served its secondary leaves nothing to start from.
        return self.primary if self.use_primary else None

    def _refit(self, series: pd.Series, state: Forecaster) -> dict[str, Any]:
        self._fit_from(series, state)
        if not self.use_primary:
            return {"mode": "full", "reason": f"{self.primary.name} did not fit"}
        refit: dict[str, Any] = self.primary.fit_summary.get("refit") or {}
        return refit or {"mode": "full", "reason": "the primary fitted in full"}

    def _fit_from(self, series: pd.Series, previous: Forecaster | None) -> None:
        """Fit the primary (from ``previous``, its last fit, when given) and the secondary."""
        interval = float(self.interval_s or 60)
        need = max(
            self.primary.min_history_steps_for(interval),
            int(np.ceil(FALLBACK_MIN_HISTORY.total_seconds() / interval)),
        )
        reason = None
        self.use_primary = False
        if len(series) < need:
            reason = (
                f"history is {len(series) * interval / 86400:.3g} days, {self.primary.name} "
                f"needs {need * interval / 86400:.3g} days ({need} steps)"
            )
        else:
            try:
                self.primary.fit(series, previous=previous)
                self.use_primary = True
            except Exception as exc:
                reason = f"{self.primary.name} failed to fit: {type(exc).__name__}: {exc}"
        self.secondary.fit(series)
        chosen = self.primary if self.use_primary else self.secondary
        if reason:
            log.warning("forecast fallback to %s: %s", self.secondary.name, reason)
        self.fit_summary.update(
            model=chosen.active_model,
            primary=self.primary.name,
            secondary=self.secondary.name,
            fallback=not self.use_primary,
            reason=reason,
            inner=chosen.fit_summary,
        )

    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        if self.use_primary:
            try:
                f = self.primary.predict(horizon, history=context)
                self.last_reason = None
                return f.mean, f.quantiles
            except Exception as exc:
                self.last_reason = (
                    f"{self.primary.name} failed to predict: {type(exc).__name__}: {exc}"
                )
                log.warning("forecast fallback to %s: %s", self.secondary.name, self.last_reason)
        f = self.secondary.predict(horizon, history=context)
        return f.mean, f.quantiles

    def _on_update(self, new_points: pd.Series) -> None:
        for model in (self.primary, self.secondary):
            if model.is_fitted:
                model.update(new_points)

    def _dump(self) -> Payload:
        out = Payload(meta={"use_primary": self.use_primary, "children": {}})
        children = [("secondary", self.secondary)]
        if self.use_primary:
            children.append(("primary", self.primary))
        for tag, model in children:
            p = model.to_payload()
            out.meta["children"][tag] = p.meta
            out.arrays.update({f"{tag}/{k}": v for k, v in p.arrays.items()})
            out.blobs.update({f"{tag}/{k}": v for k, v in p.blobs.items()})
        return out

    def _restore(self, payload: Payload) -> None:
        self.use_primary = bool(payload.meta["use_primary"])
        for tag, meta in payload.meta["children"].items():
            pre = f"{tag}/"
            child = Forecaster.from_payload(
                Payload(
                    meta=meta,
                    arrays={
                        k[len(pre) :]: v for k, v in payload.arrays.items() if k.startswith(pre)
                    },
                    blobs={k[len(pre) :]: v for k, v in payload.blobs.items() if k.startswith(pre)},
                )
            )
            setattr(self, tag, child)
