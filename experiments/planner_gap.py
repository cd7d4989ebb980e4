"""Where does Kale's planner spend more than its oracle with the `kale` forecaster?

Runs kale (the job's forecaster) on short traces — generated ones of two noise levels and
the first days of NASA — with the forecast's band transformed (``--band-scale``: the upper
quantile moved to median + α × band; 0 plans on the median alone) and planner settings as
``--set name=value``, and prints, besides the totals, what the window load charged: the
band relative to the median, the share the planner counted as noise, the timing widening,
and how often the true window mean went over the window load (calibration: at the band's
quantile it should be ≈ 1 − quantile). Also: how often the reactive floor fired, how often
the rise rule was in force, how many decisions followed a plan.

    python -m experiments.planner_gap --noisy 3 --seeds '' --band-scale 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.policy import window
from autoscaler.policy.forecasts import ForecastWindow
from autoscaler.policy.kale import KalePolicy
from autoscaler.sim.engine import simulate
from autoscaler.sim.forecasting import default_cache_dir, source_factory
from experiments.noisy_setup import WARMUP, judged, setup, traces


class Banded:
    """A forecast source whose band is scaled (α) around the median; records the windows."""

    def __init__(self, inner: Any, alpha: float) -> None:
        self.inner, self.alpha = inner, alpha
        self.seen: dict[int, ForecastWindow] = {}

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        w = self.inner.window(step, past, horizon)
        if w is None:
            return None
        if self.alpha != 1.0:
            c = np.asarray(w.central, dtype=float)
            hi = c + self.alpha * (np.asarray(w.high, dtype=float) - c)
            lo = c - self.alpha * (c - np.asarray(w.low, dtype=float))
            w = replace(w, high=hi, low=lo)
        self.seen[step] = w
        return w


class Probe(KalePolicy):
    """Kale's planner, counting what its rules did."""

    counts: dict[str, int]
    loads: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]

    def decide(self, obs: Any, state: dict[str, Any]) -> Any:
        if not hasattr(self, "counts"):
            self.counts, self.loads = {}, []
        d = super().decide(obs, state)
        r = d.reason
        for key in ("reactive", "followed", "infeasible"):
            if key in r:
                self.counts[key] = self.counts.get(key, 0) + 1
        if not obs.resizing:
            self.counts["decisions"] = self.counts.get("decisions", 0) + 1
            if "followed" not in r and self.search_settings is self.plan_settings:
                self.counts["rise_rule"] = self.counts.get("rise_rule", 0) + 1
        return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--days", type=float, default=10)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--noisy", default="3")
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--nasa", action="store_true")
    ap.add_argument("--forecaster", default="kale")
    ap.add_argument("--band-scale", type=float, default=1.0)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--cache", default="/tmp/noisy_optimal.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    job = setup(args.set)
    sizing, settings, changes = job.sizing, job.settings, job.changes
    fc = job.loaded.job.spec.forecast
    found = traces(args.days, args.seeds, args.noisy, args.noise, nasa=args.nasa)
    w = max(1, round(sizing.slo_s / sizing.interval_s))
    for name, series in found:
        seen = judged(sizing, name, series, args.days, args.noise, Path(args.cache))
        values, lb, opt = seen.values, seen.lower_bound_gpu_hours, seen.optimal_gpu_hours
        src = Banded(
            source_factory(
                args.forecaster,
                start=series.index[0],
                interval_s=60,
                horizon_steps=round(fc.horizon / 60),
                refit_s=fc.refit,
                quantile=float(fc.quantile),
                cache_dir=default_cache_dir(),
            )(),
            args.band_scale,
        )
        policy = Probe(sizing, src, settings=settings)
        t0 = time.process_time()
        state: dict[str, Any] = {}
        r = simulate(policy, sizing, values, warmup_steps=WARMUP, name="kale", state=state)
        cpu = time.process_time() - t0
        m = r.metrics()
        # What the window load charged, over the first SLO window of each forecast seen.
        rel_band, noise_part, timing, over, lvl_err, prev_err = [], [], [], [], [], []
        z = window.z_of(settings.band_quantile)
        for step, f in sorted(src.seen.items()):
            if step + w > len(values):
                continue
            c = np.maximum(np.asarray(f.central, dtype=float), 0.0)
            hi = np.maximum(np.asarray(f.high, dtype=float), c)
            past = values[:step]
            noise = math.hypot(
                window.noise_share(past, w, max(2 * w, 60)), window.noise_share(c, w, len(c))
            )
            load = window.window_load(c, hi, noise=noise, z=z, window=w, timing_steps=5)
            flat = window.window_load(c, hi, noise=noise, z=z, window=w, timing_steps=0)
            cm = float(c[:w].mean())
            if cm <= 0:
                continue
            rel_band.append(float((hi[:w] - c[:w]).mean()) / cm)
            noise_part.append(min(z * noise, rel_band[-1]))
            timing.append(float((load[:w] - flat[:w]).mean()) / cm)
            true = float(values[step : step + w].mean())
            over.append(true > float(load[:w].mean()))
            lvl_err.append(true / cm - 1.0)
            back = [src.seen[t].central[0] for t in range(step - w, step) if t in src.seen]
            if len(back) == w and sum(back) > 0:
                prev_err.append(
                    (
                        float(values[step - w : step].mean()) / float(np.mean(back)) - 1.0,
                        lvl_err[-1],
                    )
                )
        ev = r.events
        quick = sum(
            1
            for a, b in itertools.pairwise(ev)
            if b[0] - a[0] <= 60 and (a[2] - a[1]) * (b[2] - b[1]) < 0
        )
        small = sum(1 for e in ev if abs(e[2] - e[1]) == 1)
        le = np.array(lvl_err)
        pe = np.array(prev_err)
        corr = float(np.corrcoef(pe[:, 0], pe[:, 1])[0, 1]) if len(pe) > 2 else float("nan")
        slope = float(np.polyfit(pe[:, 0], pe[:, 1], 1)[0]) if len(pe) > 2 else float("nan")
        resid = pe[:, 1] - slope * pe[:, 0] if len(pe) > 2 else np.zeros(1)
        row = {
            "trace": name,
            "alpha": args.band_scale,
            "set": changes,
            "x_minw": m["gpu_hours"] / lb,
            "x_opt": m["gpu_hours"] / opt,
            "viol": m["slo_violation_rate"],
            "rescales_day": m["rescales_per_day"],
            "cum_delay": m["cumulative_delay_min"],
            "cpu_ms": 1000 * cpu / max(1, len(values) - WARMUP),
            "band_rel": float(np.mean(rel_band)),
            "noise_rel": float(np.mean(noise_part)),
            "timing_rel": float(np.mean(timing)),
            "load_exceeded": float(np.mean(over)),
            "win_err_q90": float(np.quantile(le, 0.9)),
            "win_err_q50": float(np.quantile(le, 0.5)),
            "win_err_q10": float(np.quantile(le, 0.1)),
            "reversed_within_1h": quick,
            "one_worker_resizes": small,
            "resizes": len(ev),
            "band_scale_at_end": (state.get("band_scale") or [0, 1.0])[1],
            "err_autocorr": corr,
            "err_slope": slope,
            "resid_q90": float(np.quantile(resid, 0.9)),
            "resid_q10": float(np.quantile(resid, 0.1)),
            **{k: v for k, v in policy.counts.items()},
        }
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
