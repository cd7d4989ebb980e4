"""The physical simulator behind ``kale throughput generate``: realistic and reproducible."""

from __future__ import annotations

import numpy as np
import pytest

from throughput.profile import profile_to_csv
from throughput.simulate import SimParams, TrueCurve, generate_profile, params_for_seed


@pytest.mark.parametrize("seed", range(1, 11))
def test_every_seed_is_a_ctr_job_with_a_sync_peak_between_30_and_60(seed: int) -> None:
    truth = TrueCurve(params_for_seed(seed), "sync", 4)
    peak_w, peak_f = truth.peak(1, 200)
    assert 30 <= peak_w <= 60
    assert truth.throughput(200)[0] < peak_f, "past the peak more workers slow the job down"
    assert 5 <= peak_f / truth.throughput(1)[0] <= 30, "a useful scaling range"


def test_async_throughput_keeps_rising_like_the_seed_says() -> None:
    truth = TrueCurve(SimParams(), "async", 4)
    f = truth.throughput(np.arange(4, 400, 4))  # multiples of the ratio: no ceil() jitter
    assert np.all(np.diff(f) > 0)


def test_sync_step_time_follows_the_seed_formula_at_one_point() -> None:
    p = SimParams()
    w, ps = 8, 2
    m = p.global_batch / w
    bw = min(p.bandwidth_bytes_s / w, p.bandwidth_bytes_s / ps)
    s = p.sparse_bytes_per_sample
    expected = (
        m * s / (bw * ps)
        + m * p.t_forward_s
        + p.t_backward_s
        + (m * s + p.dense_bytes) / (bw * ps)
        + m * s * p.t_update_s_per_byte / ps
        + p.lambda_ps_s * ps
        + p.lambda_worker_s * w
    )
    assert p.step_time(np.array([w]), np.array([ps]), "sync")[0] == pytest.approx(expected)


def test_same_seed_same_profile_and_noise_is_about_what_was_asked() -> None:
    a, truth = generate_profile("sync", seed=5, noise=0.03)
    b, _ = generate_profile("sync", seed=5, noise=0.03)
    assert profile_to_csv(a) == profile_to_csv(b)
    ratio = np.log(a.throughput / truth.throughput(a.workers, a.ps))
    assert 0.02 < float(ratio.std()) < 0.04


def test_profile_has_on_and_off_ratio_configurations_and_repeats() -> None:
    profile, _ = generate_profile("async", seed=2, repeats=3)
    on = profile.on_ratio(4)
    assert on.sum() > (~on).sum() > 0
    assert len(profile) > profile.n_configs
    assert profile.modes and set(profile.modes) == {"async"}
