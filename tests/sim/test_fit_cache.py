"""The simulator's cache of forecaster fits: reused for the same model, options, history and
code; never for a changed model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.sim import forecasting as simfc
from forecasting.registry import make_forecaster


def _history() -> pd.Series:
    idx = pd.date_range("2026-01-05", periods=3 * 96, freq="15min", tz="UTC")
    t = np.arange(len(idx)) / 96
    return pd.Series(200 + 100 * np.sin(2 * np.pi * t), index=idx)


class CountingNaive:
    """A real seasonal naive model that counts its fits."""

    fits = 0

    def __init__(self) -> None:
        self.model = make_forecaster("seasonal_naive", horizon=4)

    def fit(self, series: pd.Series) -> CountingNaive:
        CountingNaive.fits += 1
        self.model.fit(series)
        return self

    def save(self, path) -> None:
        self.model.save(path)

    @classmethod
    def load(cls, path) -> CountingNaive:
        out = cls.__new__(cls)
        out.model = type(make_forecaster("seasonal_naive")).load(path)
        return out


def test_a_second_fit_of_the_same_history_comes_from_the_cache(tmp_path):
    CountingNaive.fits = 0
    fit = simfc.cached_fit(tmp_path, "seasonal_naive", {"horizon": 4})
    first = fit(CountingNaive(), _history())
    again = fit(CountingNaive(), _history())
    assert CountingNaive.fits == 1 and len(list(tmp_path.iterdir())) == 1
    np.testing.assert_array_equal(first.model.predict(4).mean, again.model.predict(4).mean)


def test_changed_forecasting_code_does_not_reuse_old_fits(tmp_path, monkeypatch):
    CountingNaive.fits = 0
    fit = simfc.cached_fit(tmp_path, "seasonal_naive", {"horizon": 4})
    fit(CountingNaive(), _history())
    monkeypatch.setattr(simfc, "forecasting_code_digest", lambda: "another-version")
    fit(CountingNaive(), _history())
    assert CountingNaive.fits == 2 and len(list(tmp_path.iterdir())) == 2


def test_the_code_digest_follows_the_source_files(tmp_path):
    (tmp_path / "model.py").write_text("A = 1\n")
    (tmp_path / "notes.txt").write_text("not code")
    before = simfc.source_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("still not code")
    assert simfc.source_digest(tmp_path) == before
    (tmp_path / "model.py").write_text("A = 2\n")
    assert simfc.source_digest(tmp_path) != before
    assert len(simfc.forecasting_code_digest()) == 16


def test_every_real_fit_is_shown_and_a_cache_hit_is_not(tmp_path):
    import io

    from kale.terminal.progress import FitProgress

    CountingNaive.fits = 0
    log = io.StringIO()
    progress = FitProgress(None, label="simulate: forecaster fits", stream=log, interactive=False)
    fit = simfc.cached_fit(
        tmp_path,
        "fallback-seasonal_naive",
        {"horizon": 4},
        on_fit=lambda name, steps: progress.fit(name, steps=steps),
        label="seasonal_naive",
    )
    fit(CountingNaive(), _history())
    fit(CountingNaive(), _history())  # the same history: loaded, not fitted
    (line,) = log.getvalue().splitlines()
    assert line.startswith("kale: simulate: forecaster fits: seasonal_naive on 288 steps fitted")
    assert CountingNaive.fits == 1


def test_a_refit_is_cached_under_the_fit_it_started_from(tmp_path):
    CountingNaive.fits = 0
    fit = simfc.cached_fit(tmp_path, "seasonal_naive", {"horizon": 4})
    history = _history()
    parent = fit(CountingNaive(), history.iloc[:-96])
    child = fit(CountingNaive(), history.iloc[96:], parent)
    alone = fit(CountingNaive(), history.iloc[96:])  # the same history without a parent
    assert CountingNaive.fits == 3 and len(list(tmp_path.iterdir())) == 3
    # The same chain again, every fit from the cache (the parent loaded, not fitted).
    again = simfc.cached_fit(tmp_path, "seasonal_naive", {"horizon": 4})
    loaded_parent = again(CountingNaive(), history.iloc[:-96])
    again(CountingNaive(), history.iloc[96:], loaded_parent)
    assert CountingNaive.fits == 3
    # A parent the hook did not fit or load is not started from: a full fit (cached).
    stranger = CountingNaive().fit(history.iloc[:-96])
    again(CountingNaive(), history.iloc[96:], stranger)
    assert CountingNaive.fits == 4 and len(list(tmp_path.iterdir())) == 3
    assert child is not alone
