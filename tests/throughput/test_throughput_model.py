"""The saved model: prediction, peak, persistence, and warnings outside the profiled range."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from throughput.errors import ExtrapolationWarning, ModelFileError, ThroughputError
from throughput.fit import fit_model
from throughput.model import FORMAT, ThroughputModel
from throughput.simulate import generate_profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYNC_THETA = (4e-3, 4e-5, 3e-6, 7e-4, 6e-5, 1.6e-4)


@pytest.fixture(scope="module")
def sync_model() -> ThroughputModel:
    profile, _ = generate_profile("sync", seed=1)
    return fit_model(profile, mode="sync")


def test_save_and_load_give_the_same_predictions(
    tmp_path: Path, sync_model: ThroughputModel
) -> None:
    path = tmp_path / "m.json"
    sync_model.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT
    assert {"family", "theta", "mode", "ratio", "global_batch", "metrics", "profile_range"} <= set(
        data
    )
    back = ThroughputModel.load(path)
    w = np.arange(1, 161)
    assert back.throughput(w).tolist() == sync_model.throughput(w).tolist()
    assert (back.peak_workers, back.peak_throughput) == (
        sync_model.peak_workers,
        sync_model.peak_throughput,
    )
    assert back.profile_range == sync_model.profile_range


def test_scalar_in_float_out_and_array_in_array_out(sync_model: ThroughputModel) -> None:
    one = sync_model.throughput(12)
    many = sync_model.throughput([12, 13])
    assert isinstance(one, float)
    assert isinstance(many, np.ndarray) and many.shape == (2,)
    assert many[0] == one
    assert sync_model.throughput(12, 3) == one, "p defaults to ceil(w / ratio)"


def test_sync_peak_is_inside_the_range_and_past_it_throughput_falls(
    sync_model: ThroughputModel,
) -> None:
    peak = sync_model.peak_workers
    assert 30 <= peak <= 60
    assert not sync_model.peak_at_range_edge
    w = np.arange(sync_model.min_workers, sync_model.max_workers + 1)
    f = sync_model.throughput(w, warn=False)
    assert f.max() == sync_model.peak_throughput
    assert f[-1] < sync_model.peak_throughput


def test_async_throughput_still_rises_so_the_peak_is_the_range_cap() -> None:
    profile, _ = generate_profile("async", seed=1)
    model = fit_model(profile, mode="async", max_workers=120)
    assert model.peak_workers == 120 and model.peak_at_range_edge


def test_peak_moves_with_the_allowed_range(sync_model: ThroughputModel) -> None:
    narrow = sync_model.with_range(1, 20)
    assert narrow.peak_workers == 20
    assert narrow.peak_throughput == sync_model.throughput(20)


def test_predicting_far_outside_the_profile_warns(sync_model: ThroughputModel) -> None:
    with pytest.warns(ExtrapolationWarning, match="far outside the profiled range 1–80"):
        sync_model.throughput(400)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sync_model.throughput(160)  # 2x the profiled maximum is still trusted


def test_fixed_ratio_family_warns_when_given_a_ps_it_ignores() -> None:
    model = ThroughputModel("fixed-ratio", "sync", (8e-3, 0.2, 9e-5), 4096, 4)
    with pytest.warns(ExtrapolationWarning, match="assumes ps = ceil"):
        model.throughput(8, 4)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"theta": (1.0, 2.0)}, "takes 6 coefficients"),  # wrong length
        ({"theta": (-1.0, 0, 0, 0, 0, 0)}, "non-negative"),  # negative θ
        ({"theta": (0.0,) * 6}, "at least one positive"),  # all zero: infinite throughput
        ({"ratio": 0}, "ratio must be a positive integer"),  # no PS tie
        ({"global_batch": 0.0}, "global_batch must be positive"),  # no batch
        ({"min_workers": 10, "max_workers": 5}, "must not exceed"),  # empty range
        ({"family": "cubic"}, "unknown family"),  # unknown family
    ],
)
def test_invalid_models_are_rejected(kwargs: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {
        "family": "general",
        "mode": "sync",
        "theta": SYNC_THETA,
        "global_batch": 4096,
        "ratio": 4,
    }
    with pytest.raises(ThroughputError, match=fragment):
        ThroughputModel(**{**base, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, ": no such file"),  # missing
        ("{not json", ":1: not valid JSON"),  # broken JSON, with its line
        ('{"format": "kale.throughput/v0"}', "format: expected 'kale.throughput/v1'"),  # old
        ("[1, 2]", "expected a JSON object"),  # wrong top-level type
        ('{"format": "kale.throughput/v1", "family": "general"}', "missing field 'mode'"),
        (
            '{"format": "kale.throughput/v1", "family": "general", "mode": "sync",'
            ' "theta": "abc", "global_batch": 1, "ratio": 4}',
            "theta: expected a list of numbers",
        ),
        (
            '{"format": "kale.throughput/v1", "family": "general", "mode": "sync",'
            ' "theta": [1, 2], "global_batch": 1, "ratio": 4}',
            "takes 6 coefficients",
        ),
    ],
)
def test_bad_model_files_name_the_file_and_the_problem(
    tmp_path: Path, content: str | None, fragment: str
) -> None:
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ModelFileError) as info:
        ThroughputModel.load(path)
    assert str(info.value).startswith(str(path))
    assert fragment in str(info.value)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_example_models_load_and_match_their_profiles(mode: str) -> None:
    model = ThroughputModel.load(EXAMPLES / "models" / f"ctr-{mode}.json")
    assert model.mode == mode and model.ratio == 4 and model.global_batch == 4096
    assert (EXAMPLES / "profiles" / f"ctr-{mode}.csv").is_file()
    assert model.metrics["cv_mape"] is not None and model.metrics["cv_mape"] < 5
    if mode == "sync":
        assert 30 <= model.peak_workers <= 60


def test_package_is_a_leaf_that_never_imports_the_autoscaler() -> None:
    code = (
        "import sys, throughput, throughput.simulate, throughput.solver, throughput.fit\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'autoscaler', 'kale', 'kube', 'scheduler', 'torch', 'forecasting', 'matplotlib',"
        " 'click'})\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
