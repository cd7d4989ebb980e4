"""Benchmark of the worker estimator: solver speed, fit time, and accuracy against the truth.

Run from the repository root::

    .venv/bin/python -m benchmarks.throughput            # 10 seeds, table + JSON
    .venv/bin/python -m benchmarks.throughput --seeds 3 --json-out bench.json

For every seed and mode it simulates a profile (3 % noise), holds out 20 % of the
configurations, fits ``auto`` on the rest and reports the held-out MAPE, the error against
the noise-free truth, how often ``plan`` returns the true minimum w (±1) and whether
``saturated`` matches the true peak; it also cross-validates every family on the full
profile (the ``compare`` table). Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from throughput.errors import ExtrapolationWarning
from throughput.families import families_for
from throughput.fit import compare_families, fit_model
from throughput.model import ThroughputModel
from throughput.simulate import generate_profile
from throughput.solver import plan
from throughput.theta import fit_theta

MODES = ("sync", "async")
HI = 80  # planning range for accuracy: the profiled range


def solver_speed(model: ThroughputModel, *, calls: int = 20_000) -> dict[str, float]:
    """µs per plan() call over [1, 1000] (warm cache) and the one-off table build."""
    big = model.with_range(1, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        t0 = time.perf_counter()
        big.capacity_table()
        cold = (time.perf_counter() - t0) * 1e6
    peak = big.peak_throughput
    rnd = random.Random(0)
    loads = [rnd.uniform(0, 1.1 * peak) for _ in range(calls)]
    backlog_loads = loads[: calls // 4]
    t0 = time.perf_counter()
    for load in loads:
        plan(big, load)
    warm = (time.perf_counter() - t0) / calls * 1e6
    t0 = time.perf_counter()
    for load in backlog_loads:
        plan(big, load, backlog=1e6, drain_within_s=300.0)
    backlog = (time.perf_counter() - t0) / len(backlog_loads) * 1e6
    return {"us_per_call": warm, "us_per_call_backlog": backlog, "table_build_us": cold}


def fit_seconds(mode: str, seed: int, repeats: int = 5) -> dict[str, dict[str, float]]:
    """Median seconds of one fit and of fit + 5-fold CV, per family."""
    profile, _ = generate_profile(mode, seed=seed)
    out: dict[str, dict[str, float]] = {}
    for fam in families_for(mode):
        single, with_cv = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fit_theta(fam, profile, ratio=4, global_batch=4096)
            single.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fit_model(profile, mode=mode, family=fam.name)
            with_cv.append(time.perf_counter() - t0)
        out[fam.name] = {"fit_s": statistics.median(single), "fit_cv_s": statistics.median(with_cv)}
    t0 = time.perf_counter()
    fit_model(profile, mode=mode)
    out["auto"] = {"fit_s": float("nan"), "fit_cv_s": time.perf_counter() - t0}
    return out


def accuracy(mode: str, seed: int) -> dict[str, object]:
    """Held-out MAPE, truth error, plan accuracy and the compare table for one profile."""
    profile, truth = generate_profile(mode, seed=seed, noise=0.03)
    ids = profile.config_ids()
    n = int(ids.max()) + 1
    held = np.isin(ids, np.random.default_rng(1000 + seed).permutation(n)[: n // 5])
    test = profile.select(held)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        model = fit_model(profile.select(~held), mode=mode)
        pred = model.throughput(test.workers, test.ps)
        w = np.arange(1, HI + 1)
        truth_err = np.abs(model.throughput(w) / truth.throughput(w) - 1) * 100
        ranged = model.with_range(1, HI)
        ranged.capacity_table()
    held_mape = float(np.mean(np.abs(pred - test.throughput) / test.throughput) * 100)

    peak_w, peak = truth.peak(1, HI)
    hits_85 = hits_98 = n_85 = n_98 = 0
    worst = 0
    for frac in np.linspace(0.02, 0.98, 97):
        load = float(frac * peak)
        got = plan(ranged, load).workers
        want = truth.min_workers(load, 1, HI)
        assert want is not None
        ok = abs(got - want) <= 1
        worst = max(worst, abs(got - want))
        n_98 += 1
        hits_98 += ok
        if frac <= 0.85:
            n_85 += 1
            hits_85 += ok
    sat_ok = sat_n = 0
    for frac in (0.5, 0.9, 0.97, 0.98, 1.02, 1.05, 1.5, 3.0):
        sat_n += 1
        sat_ok += plan(ranged, frac * peak).saturated == (frac > 1)
    cmp = {f.family.name: f.cv_mape for f in compare_families(profile, mode=mode)}
    return {
        "mode": mode,
        "seed": seed,
        "family": model.family,
        "heldout_mape": held_mape,
        "truth_mape": float(truth_err.mean()),
        "truth_max_err": float(truth_err.max()),
        "true_peak_workers": peak_w,
        "fitted_peak_workers": ranged.peak_workers,
        "peak_throughput_err_pct": (ranged.peak_throughput / peak - 1) * 100,
        "plan_within_1_upto_85pct": hits_85 / n_85,
        "plan_within_1_upto_98pct": hits_98 / n_98,
        "plan_worst_miss": worst,
        "saturated_correct": sat_ok / sat_n,
        "cv_mape": cmp,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N per mode")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()

    speed = {}
    for mode in MODES:
        profile, _ = generate_profile(mode, seed=1)
        speed[mode] = solver_speed(fit_model(profile, mode=mode))
    fits = {mode: fit_seconds(mode, 1) for mode in MODES}
    rows = [accuracy(mode, seed) for mode in MODES for seed in range(1, args.seeds + 1)]

    print("solver (w ≤ 1000, warm cache)")
    for mode, s in speed.items():
        print(
            f"  {mode:5s}  {s['us_per_call']:6.2f} µs/call   with backlog "
            f"{s['us_per_call_backlog']:6.2f} µs/call   table build {s['table_build_us']:7.1f} µs"
        )
    print("\nfit seconds (median; fit alone / fit + 5-fold CV)")
    for mode, per in fits.items():
        cells = "  ".join(f"{k}={v['fit_s']:.4f}/{v['fit_cv_s']:.4f}" for k, v in per.items())
        print(f"  {mode:5s}  {cells}")
    print(
        "\nmode  seed family       heldout%  truth%  truth-max%  peak(true/fit)  "
        "±1≤85%  ±1≤98%  worst  sat   | cv_mape: general fixed-ratio linear optimus"
    )
    for r in rows:
        cv = r["cv_mape"]
        assert isinstance(cv, dict)
        print(
            f"{r['mode']:5s} {r['seed']:4d} {r['family']:12s} {r['heldout_mape']:8.2f} "
            f"{r['truth_mape']:7.2f} {r['truth_max_err']:11.2f} "
            f"{r['true_peak_workers']:7d}/{r['fitted_peak_workers']:<6d} "
            f"{r['plan_within_1_upto_85pct']:7.0%} {r['plan_within_1_upto_98pct']:7.0%} "
            f"{r['plan_worst_miss']:6d} {r['saturated_correct']:4.0%}  | "
            f"{cv['general']:7.2f} {cv['fixed-ratio']:11.2f} {cv['linear']:6.2f} "
            f"{cv['optimus']:7.2f}"
        )
    summary = {
        mode: {
            "heldout_mape_max": max(r["heldout_mape"] for r in rows if r["mode"] == mode),
            "plan_within_1_upto_85pct_min": min(
                r["plan_within_1_upto_85pct"] for r in rows if r["mode"] == mode
            ),
            "saturated_correct_min": min(r["saturated_correct"] for r in rows if r["mode"] == mode),
            "seed_beats_linear_everywhere": all(
                min(r["cv_mape"]["general"], r["cv_mape"]["fixed-ratio"]) < r["cv_mape"]["linear"]
                for r in rows
                if r["mode"] == mode
            ),
        }
        for mode in MODES
    }
    print("\nsummary:", json.dumps(summary))
    result = {"solver": speed, "fit_seconds": fits, "accuracy": rows, "summary": summary}
    text = json.dumps(result, indent=2, default=float)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")


if __name__ == "__main__":
    main()
