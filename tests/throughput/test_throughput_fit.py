"""Fitting: accuracy on simulated profiles, family selection, and why the seed model is needed."""

from __future__ import annotations

import math
import warnings
from functools import cache

import numpy as np
import pytest

from throughput.crossval import cross_validate, fold_of_rows
from throughput.errors import ExtrapolationWarning, FitError
from throughput.families import families_for, get_family
from throughput.fit import compare_families, fit_model
from throughput.model import ThroughputModel
from throughput.profile import Profile
from throughput.simulate import generate_profile

SEEDS = (1, 2, 3, 4, 5)
MODES = ("sync", "async")


@cache
def _split(mode: str, seed: int) -> tuple[ThroughputModel, Profile, Profile]:
    """Fit on 80 % of the configurations of a simulated profile; return (model, train, test)."""
    profile, _ = generate_profile(mode, seed=seed, noise=0.03)
    ids = profile.config_ids()
    n = int(ids.max()) + 1
    held = np.random.default_rng(1000 + seed).permutation(n)[: n // 5]
    test = np.isin(ids, held)
    train = profile.select(~test)
    return fit_model(train, mode=mode), train, profile.select(test)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_held_out_mape_is_within_5_percent(mode: str, seed: int) -> None:
    model, _, test = _split(mode, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        pred = model.throughput(test.workers, test.ps)
    mape = float(np.mean(np.abs(pred - test.throughput) / test.throughput) * 100)
    assert mape <= 5.0, f"{mode} seed {seed}: held-out MAPE {mape:.2f} %"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_fit_tracks_the_noise_free_truth_closely(mode: str, seed: int) -> None:
    model, _, _ = _split(mode, seed)
    _, truth = generate_profile(mode, seed=seed)
    w = np.arange(1, 81)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        error = np.abs(model.throughput(w) / truth.throughput(w) - 1)
    assert float(error.mean()) < 0.015
    assert float(error.max()) < 0.05


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(1, 11))
def test_seed_family_beats_linear_in_cv_on_every_generated_profile(mode: str, seed: int) -> None:
    profile, _ = generate_profile(mode, seed=seed)
    fits = {f.family.name: f for f in compare_families(profile, mode=mode)}
    best_seed = min(fits["general"].cv_mape, fits["fixed-ratio"].cv_mape)
    assert best_seed < fits["linear"].cv_mape
    assert best_seed <= 5.0


def test_compare_reports_every_family_including_linear_and_optimus() -> None:
    profile, _ = generate_profile("sync", seed=1)
    fits = compare_families(profile, mode="sync")
    assert [f.family.name for f in fits] == ["general", "fixed-ratio", "linear", "optimus"]
    assert all(math.isfinite(f.cv_mape) for f in fits)
    assert [f.family.selectable for f in fits] == [True, True, False, False]


@pytest.mark.parametrize("mode", MODES)
def test_auto_never_picks_a_comparison_family(mode: str) -> None:
    for seed in (1, 2, 3):
        profile, _ = generate_profile(mode, seed=seed)
        model = fit_model(profile, mode=mode)
        assert model.family in ("general", "fixed-ratio")
        assert set(model.candidates) == {"general", "fixed-ratio"}


def test_named_comparison_family_is_fitted_when_asked() -> None:
    profile, _ = generate_profile("async", seed=1)
    model = fit_model(profile, mode="async", family="linear")
    assert model.family == "linear"
    # f = w / θ0 is a straight line through the origin
    assert model.throughput(40) == pytest.approx(40 * model.throughput(1))


@pytest.mark.parametrize(
    ("mode", "name", "theta"),
    [
        ("sync", "general", (4e-3, 4e-5, 3e-6, 7e-4, 6e-5, 1.6e-4)),
        ("sync", "fixed-ratio", (8e-3, 0.2, 9e-5)),
        ("async", "general", (0.05, 2e-3, 3e-4, 1.2e-4)),
        ("async", "fixed-ratio", (0.05, 0.01, 2e-4)),
    ],
)
def test_noise_free_data_from_a_family_is_fitted_exactly(
    mode: str, name: str, theta: tuple[float, ...]
) -> None:
    truth = ThroughputModel(name, mode, theta, 4096, 4)
    w = np.repeat(np.arange(1, 81, 3), 2)
    p = np.where(np.arange(len(w)) % 2 == 0, -(-w // 4), -(-w // 2))
    if not truth.family_spec.uses_ps:
        p = -(-w // 4)
    f = truth.throughput(w, p, warn=False)
    model = fit_model(Profile.from_arrays(w, p, f), mode=mode, family=name)
    pred = model.throughput(w, p, warn=False)
    assert np.max(np.abs(pred / f - 1)) < 1e-6
    assert model.metrics["mape"] < 1e-4


def test_too_few_configurations_is_a_fit_error_naming_the_need() -> None:
    profile = Profile.from_arrays([1, 2, 4], [1, 1, 1], [10.0, 19.0, 35.0], source="tiny.csv")
    with pytest.raises(FitError, match=r"tiny.csv: family general needs at least 6 distinct"):
        fit_model(profile, mode="sync", family="general")


def test_auto_on_a_small_profile_falls_back_to_the_family_that_fits() -> None:
    profile = Profile.from_arrays([1, 2, 4, 8], [1, 1, 1, 2], [10.0, 19.0, 35.0, 60.0])
    model = fit_model(profile, mode="sync")
    assert model.family == "fixed-ratio"


def test_folds_keep_repeats_of_a_configuration_together() -> None:
    profile, _ = generate_profile("sync", seed=3, repeats=3)
    folds = fold_of_rows(profile, 5, seed=0)
    ids = profile.config_ids()
    for cfg in np.unique(ids):
        assert len(set(folds[ids == cfg].tolist())) == 1
    assert set(folds.tolist()) == set(range(5))


def test_cross_validation_is_deterministic_for_a_seed() -> None:
    profile, _ = generate_profile("sync", seed=2)
    fam = get_family("sync", "general")
    a = cross_validate(fam, profile, ratio=4, global_batch=4096, seed=7)
    b = cross_validate(fam, profile, ratio=4, global_batch=4096, seed=7)
    assert a == b


def test_fitted_model_records_what_the_issue_asks_for() -> None:
    profile, _ = generate_profile("sync", seed=1)
    model = fit_model(profile, mode="sync")
    assert model.ratio == 4 and model.global_batch == 4096 and model.mode == "sync"
    assert set(model.metrics) >= {"mape", "cv_mape", "r2"}
    assert model.profile_range is not None
    assert (model.profile_range.workers_min, model.profile_range.workers_max) == (1, 80)
    assert model.max_workers == 160, "default allowed range: up to 2x the profiled maximum"
    assert all(t >= 0 for t in model.theta)


def test_every_family_has_a_formula_and_positive_design() -> None:
    w = np.array([1, 7, 100])
    p = np.array([1, 2, 25])
    for mode in MODES:
        for fam in families_for(mode):
            x = fam.design(w, p, 4096)
            assert x.shape == (3, fam.n_params)
            assert np.all(x > 0), f"{mode}/{fam.name}: every term must be positive"
            assert fam.formula().count("θ") == fam.n_params


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"mode": "both"}, "mode must be 'sync' or 'async'"),  # unknown mode
        ({"mode": "sync", "family": "cubic"}, "unknown family 'cubic'"),  # unknown family
        ({"mode": "sync", "ratio": 0}, "ratio must be a positive integer"),  # zero ratio
        ({"mode": "sync", "global_batch": -1.0}, "global batch must be positive"),  # bad M
    ],
)
def test_bad_fit_arguments_are_errors(kwargs: dict[str, object], fragment: str) -> None:
    profile, _ = generate_profile("sync", seed=1)
    with pytest.raises(ValueError, match=fragment):
        fit_model(profile, **kwargs)  # type: ignore[arg-type]
