"""A job's live forecaster: the one forecast feed, with fits in the controller's fit pool.

What the planner is shown (refit schedule, context window, forecast grid, quantile, interim
model) is decided by :class:`autoscaler.policy.feed.ForecastFeed`, the same feed the
simulator drives, so a simulated run describes the controller. This module only adds what a
live loop needs around it: fits in the background (:class:`FitPool`: a transformer fit takes
seconds to a minute, and a loop that waited for it would stop deciding for every job
meanwhile; the old model keeps serving until the new one is ready, and before the first fit
is done an *interim* model — seasonal naive, which needs no training — serves, so a new job is
never planned blind; each refit starts from the serving fit, incrementally where the data
allows, as the feed's synchronous driver does), failures turned into "no forecast" with the
reason kept for the job's status, and the status summary; and the planner's source
(:class:`GivenForecast`), through which the window made here reaches the planner as the
value of each decision.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypedDict

import numpy as np

from autoscaler.controller.metering import ArrivalHistory
from autoscaler.controller.timefmt import iso
from autoscaler.policy.feed import FeedSettings, ForecastFeed, History, fit_model, refresh
from autoscaler.policy.forecasts import ForecastWindow

log = logging.getLogger(__name__)


class ForecastSummary(TypedDict, total=False):
    """``status.forecast`` (and ``kale plan``'s ``forecast``): which model, how fresh, what
    it says next."""

    model: str
    fittedAt: str
    note: str
    fitting: bool
    next: float | None
    """Mean forecast rate of the next step (samples/s; None: not a finite number)."""
    peak: float | None
    """Highest upper-band rate over the horizon (None: not a finite number)."""
    horizonSeconds: float


class FitPool:
    """A few daemon threads that run forecaster fits, shared by every job of a replica,
    the stalest forecast first.

    Fits wait in a priority queue keyed by when the serving model was fitted (never: first),
    so when fits pile up — a replica taking over a dead one's shards, thousands of jobs due
    on the same day — the jobs planning on the oldest models get new ones first, not the
    ones that happened to ask first. Daemon threads: a fit cannot be interrupted, and a
    controller that is stopping must not wait a minute for a model nobody will use.
    """

    def __init__(self, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError("a pool needs at least one thread")
        self.threads = threads
        self._heap: list[tuple[float, int, Future[Any], Callable[[], Any]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._started: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[[], Any], *, fitted_at: float | None = None) -> Future[Any]:
        """Run ``fn()`` when its turn comes: the oldest ``fitted_at`` first (None, a job
        with no model yet, before all), in the order submitted among equals."""
        fut: Future[Any] = Future()
        with self._cond:
            if self._closed:
                fut.set_exception(RuntimeError("the fit pool is closed"))
                return fut
            key = -math.inf if fitted_at is None else fitted_at
            heapq.heappush(self._heap, (key, next(self._seq), fut, fn))
            if self._idle == 0 and len(self._started) < self.threads:
                t = threading.Thread(
                    target=self._work, name=f"kale-fit-{len(self._started)}", daemon=True
                )
                self._started.append(t)
                t.start()
            self._cond.notify()
        return fut

    def queued(self) -> int:
        """Fits waiting for a thread (the backlog a replica exports)."""
        with self._cond:
            return sum(1 for *_, fut, _ in self._heap if not fut.cancelled())

    def _work(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._heap and not self._closed:
                    self._cond.wait()
                self._idle -= 1
                if not self._heap:
                    return  # closed and drained
                _, _, fut, fn = heapq.heappop(self._heap)
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # the future carries it to whoever reads it
                fut.set_exception(exc)

    def close(self) -> None:
        """Stop taking work; queued fits are cancelled, running ones finish unobserved."""
        with self._cond:
            self._closed = True
            for _, _, fut, _ in self._heap:
                fut.cancel()
            self._heap.clear()
            self._cond.notify_all()


class ForecastCache:
    """Fits ``make()`` on the arrival history and serves planner windows (through the feed).

    ``pool``: fit in the background there (None: fit inside :meth:`window`, as the tests and
    the simulator-equivalence test do). ``interim``: the model that serves until the first
    background fit is done (None: no forecast until then). ``reforecast_s``: forecasts are
    made on a grid of this many seconds and sliced in between (None: every interval).
    """

    def __init__(
        self,
        make: Callable[[], Any],
        *,
        name: str,
        interval_s: float,
        horizon_steps: int,
        refit_s: float,
        quantile: float = 0.9,
        reforecast_s: float | None = None,
        min_points: int = 2,
        pool: FitPool | None = None,
        interim: Callable[[], Any] | None = None,
        context_s: float | None = None,
    ) -> None:
        self.make = make
        self.interval_s = interval_s
        self.horizon_steps = horizon_steps
        self.quantile = quantile
        """The upper band's quantile (``spec.forecast.quantile``)."""
        every = 1 if reforecast_s is None else max(1, round(reforecast_s / interval_s))
        extra = {} if context_s is None else {"context_s": context_s}
        self.feed = ForecastFeed(
            FeedSettings(
                interval_s=interval_s,
                horizon_steps=horizon_steps,
                refit_s=refit_s,
                quantile=quantile,
                predict_every=every,
                min_points=min_points,
                **extra,
            ),
            keep_fits=2,
            keep_forecasts=2,
            name=name,
        )
        self.fitted_at: float | None = None
        """Epoch seconds at which the serving model's fit was started."""
        self.last_window: ForecastWindow | None = None
        self.pool = pool
        self.interim = interim
        self.interim_active = False
        """The model serving now is the interim one (the first real fit is not done yet)."""
        self._pending: Future[Any] | None = None
        self._pending_at = 0.0
        self._pending_due = 0
        self._pending_len = 0

    # -- the feed's state, as the loop and the status read it ---------------------------
    @property
    def name(self) -> str:
        return self.feed.name

    @property
    def reason(self) -> str | None:
        return self.feed.reason

    @reason.setter
    def reason(self, value: str | None) -> None:
        self.feed.reason = value

    @property
    def failures(self) -> int:
        """Fits and predictions that raised (the loop counts them as errors)."""
        return self.feed.failures

    @property
    def model(self) -> Any:
        """The model installed last (the interim one until the first fit is done)."""
        return self.feed.fits[-1].model if self.feed.fits else None

    @property
    def fitted_len(self) -> int:
        """Intervals of history the serving model was fitted on."""
        fit = self.feed.latest()
        return fit.length if fit is not None else 0

    # -- fits ---------------------------------------------------------------------------
    def _collect(self, step: int) -> None:
        """Install a finished background fit (a failed one keeps the model serving now)."""
        fut = self._pending
        if fut is None or not fut.done():
            return
        self._pending = None
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.feed.failed(exc or RuntimeError("cancelled"), step=step)
            log.warning("forecaster %s: %s", self.name, self.reason)
            return
        self.feed.install(fut.result(), step=self._pending_due, length=self._pending_len)
        self.fitted_at = self._pending_at

    def _fit_in_background(self, now: float, history: History, step: int) -> None:
        """Start a due fit if none runs; serve the interim model until the first one is done."""
        assert self.pool is not None
        due = self.feed.due(history, step) if self._pending is None else None
        if due is not None:
            series = self.feed.fit_input(history, due).series()
            make = self.make
            last = self.feed.latest()
            # The refit starts from the serving model (read, never changed, while it serves).
            previous = last.model if last is not None else None

            def fit() -> Any:
                model = make()
                fitted = fit_model(model, series, previous)
                return fitted if fitted is not None else model

            self._pending = self.pool.submit(fit, fitted_at=self.fitted_at)
            self._pending_at = now
            self._pending_due, self._pending_len = due, len(series)
        if self.feed.in_force(step) is not None or self.interim is None:
            return
        try:
            model = self.interim()
            model.fit(self.feed.fit_input(history, step).series())
        except Exception as exc:
            self.feed.failed(exc, step=step)
            return
        self.feed.install(model, step=step, length=len(history), interim=True)

    def fitting(self) -> bool:
        """A background fit is running or queued."""
        return self._pending is not None and not self._pending.done()

    def close(self) -> None:
        """Forget a queued fit (a running one finishes; nobody reads it)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    # -- forecasts ----------------------------------------------------------------------
    def window(self, now: float, history: ArrivalHistory, step: int) -> ForecastWindow | None:
        """Forecast for steps ``step … step + H − 1``; None when there is none."""
        self.last_window = None
        if len(history) < self.feed.settings.min_points:
            self.reason = (
                f"history has {len(history)} intervals, need {self.feed.settings.min_points}"
            )
            return None
        hist = History.of(history)
        if self.pool is None:
            before = self.feed.fits[-1].serial if self.feed.fits else 0
            if not refresh(self.feed, hist, step, self.make):
                log.warning("forecaster %s: %s", self.name, self.reason)
            elif self.feed.fits and self.feed.fits[-1].serial != before:
                self.fitted_at = now
        else:
            self._collect(step)
            self._fit_in_background(now, hist, step)
            if self.feed.in_force(step) is None and self.fitting():
                self.reason = "the first fit is running"
        fit = self.feed.in_force(step)
        self.interim_active = fit is not None and fit.interim
        failures = self.feed.failures
        self.last_window = self.feed.window(hist, step)
        if self.feed.failures > failures:
            log.warning("forecaster %s: %s", self.name, self.reason)
        return self.last_window

    def summary(self) -> ForecastSummary:
        """What the status shows about the forecast, JSON as it is (every job, every tick:
        no conversion pass after): plain strings, and rates that are not finite as None."""
        out: ForecastSummary = {
            "model": f"{self.feed.interim_name} (interim)" if self.interim_active else self.name
        }
        if self.fitted_at is not None:
            out["fittedAt"] = iso(self.fitted_at)
        if self.reason:
            out["note"] = str(self.reason)
        if self.fitting():
            out["fitting"] = True
        w = self.last_window
        if w is not None and len(w):
            out["next"] = _finite(float(w.mean[0]))
            out["peak"] = _finite(float(np.maximum.reduce(w.high)))  # w.high.max(), less wrapping
            out["horizonSeconds"] = len(w) * self.interval_s
        return out


def _finite(x: float) -> float | None:
    """``x``, or None where JSON has no number for it (NaN, ±inf)."""
    return x if math.isfinite(x) else None


class GivenForecast:
    """The planner's :class:`~autoscaler.policy.forecasts.ForecastSource` in the controller:
    the window the plan stage made for the decision at hand.

    The controller makes each job's forecast itself, before the planner runs (fits in the
    background, failures counted, the window also shown in the status), so the planner's
    source does not forecast: :meth:`given` hands it the window for one decision step, and
    :meth:`window` answers for that step only, cut to the horizon asked for — outside a
    ``given`` block, or for another step, there is no forecast.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        """Names the forecast when the window does not (``ForecastWindow.source`` empty)."""
        self._step: int | None = None
        self._window: ForecastWindow | None = None

    def given(self, step: int, window: ForecastWindow | None) -> GivenForecast:
        """The decision at ``step`` is made on ``window`` (None: no forecast), until the
        ``with`` block this is used in ends."""
        self._step, self._window = step, window
        return self

    def __enter__(self) -> GivenForecast:
        return self

    def __exit__(self, *exc: object) -> None:
        self._step, self._window = None, None

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        w = self._window
        if step != self._step or w is None or len(w) < horizon:
            return None
        if len(w) == horizon and w.source and _float_arrays(w):
            return w  # what the cut would give: the planner asks for the whole window
        return replace(w.head(horizon), source=w.source or self.name)


_F64 = np.dtype(np.float64)


def _float_arrays(w: ForecastWindow) -> bool:
    """Every band of ``w`` is already the float array :meth:`ForecastWindow.head` makes
    (asked for every job every tick: plain checks, no generator)."""
    mean, low, high, central = w.mean, w.low, w.high, w.central
    return (
        type(mean) is np.ndarray
        and type(low) is np.ndarray
        and type(high) is np.ndarray
        and type(central) is np.ndarray
        and mean.dtype == _F64
        and low.dtype == _F64
        and high.dtype == _F64
        and central.dtype == _F64
    )
