"""``kale throughput``: fit, compare and use parameter-server throughput models.

Thin by design: each subcommand parses flags, calls one function of the ``throughput``
package and prints. ``throughput`` raises its own errors (it never imports ``autoscaler``);
they are turned into :class:`UserError` here, so a bad file is one line and exit code 2.
Extrapolation warnings are printed as one ``kale: warning:`` line each on stderr.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from autoscaler.atomic import atomic_path
from autoscaler.cli.output import emit_json, table
from autoscaler.durations import parse_duration
from autoscaler.errors import UserError

MODE = click.Choice(["sync", "async"])
FAMILY = click.Choice(["auto", "general", "fixed-ratio", "linear", "optimus"])
FILE_IN = click.Path(dir_okay=False, path_type=Path)
FILE_OUT = click.Path(dir_okay=False, writable=True, path_type=Path)


@contextlib.contextmanager
def _library_errors() -> Iterator[None]:
    """Map the throughput package's errors to UserError; print its warnings as one line each."""
    from throughput.errors import ExtrapolationWarning, ThroughputError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except ThroughputError as exc:
            raise UserError(str(exc)) from None
        finally:
            seen: set[str] = set()
            for w in caught:
                text = str(w.message)
                if text not in seen and issubclass(w.category, ExtrapolationWarning):
                    seen.add(text)
                    click.echo(f"kale: warning: {text}", err=True)


def _positive(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and value <= 0:
        raise click.BadParameter("must be positive")
    return value


def _non_negative(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and (value < 0 or (isinstance(value, float) and math.isnan(value))):
        raise click.BadParameter("must be ≥ 0")
    return value


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds <= 0:
        raise click.BadParameter("must be a positive duration")
    return seconds


def _rate(x: float) -> str:
    return f"{x:,.0f} samples/s"


# Options that several commands take, declared once.
_PROFILE = click.option(
    "--profile",
    "profile_path",
    type=FILE_IN,
    required=True,
    help="Profile CSV: workers,ps,throughput[,mode].",
)
_RATIO = click.option(
    "--ratio",
    type=int,
    default=4,
    show_default=True,
    callback=_positive,
    help="Workers per PS; the planner uses ps = ceil(workers / ratio).",
)
_GLOBAL_BATCH = click.option(
    "--global-batch",
    type=float,
    default=4096,
    show_default=True,
    callback=_positive,
    help="Global batch M (samples per synchronous step).",
)
_FOLDS = click.option(
    "--folds",
    type=click.IntRange(2, 50),
    default=5,
    show_default=True,
    help="Cross-validation folds (by configuration).",
)
_FOLD_SEED = click.option(
    "--seed", type=int, default=0, show_default=True, help="Fold shuffling seed."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@click.group()
def throughput() -> None:
    """Fit and use parameter-server throughput models (samples/s as a function of w, p)."""


# ----------------------------------------------------------------------------------- fit


@throughput.command()
@_PROFILE
@click.option("--mode", type=MODE, required=True, help="Training mode of the job.")
@_RATIO
@click.option(
    "--family",
    type=FAMILY,
    default="auto",
    show_default=True,
    help="Model family; auto picks the seed family with the best CV MAPE.",
)
@_GLOBAL_BATCH
@click.option(
    "--min-workers",
    type=int,
    default=1,
    show_default=True,
    callback=_positive,
    help="Smallest allowed worker count.",
)
@click.option(
    "--max-workers",
    type=int,
    default=None,
    callback=_positive,
    help="Largest allowed worker count (default: 2x the largest profiled).",
)
@_FOLDS
@_FOLD_SEED
@click.option("-o", "--output", type=FILE_OUT, default=None, help="Write the model JSON here.")
@_JSON
def fit(
    profile_path: Path,
    mode: str,
    ratio: int,
    family: str,
    global_batch: float,
    min_workers: int,
    max_workers: int | None,
    folds: int,
    seed: int,
    output: Path | None,
    as_json: bool,
) -> None:
    """Fit a throughput model to a profile and save it."""
    from throughput.fit import fit_model
    from throughput.profile import load_profile

    with _library_errors():
        profile = load_profile(profile_path)
        if max_workers is not None and max_workers < min_workers:
            raise UserError(f"--max-workers ({max_workers}) is below --min-workers ({min_workers})")
        model = fit_model(
            profile,
            mode=mode,
            ratio=ratio,
            global_batch=global_batch,
            family=family,
            k=folds,
            seed=seed,
            min_workers=min_workers,
            max_workers=max_workers,
        )
        if output is not None:
            try:
                model.save(output)
            except OSError as exc:
                raise UserError(f"{output}: cannot write ({exc.strerror or exc})") from None
        result = {
            "family": model.family,
            "theta": list(model.theta),
            "mape": model.metrics.get("mape"),
            "cv_mape": model.metrics.get("cv_mape"),
            "r2": model.metrics.get("r2"),
            "peak_workers": model.peak_workers,
            "peak_throughput": model.peak_throughput,
            "peak_ps": model.ps_for(model.peak_workers),
            "peak_at_range_edge": model.peak_at_range_edge,
            "mode": model.mode,
            "formula": model.family_spec.formula(),
            "ratio": model.ratio,
            "global_batch": model.global_batch,
            "min_workers": model.min_workers,
            "max_workers": model.max_workers,
            "candidates": {name: row.get("cv_mape") for name, row in model.candidates.items()},
            "model": None if output is None else str(output),
        }
    if as_json:
        emit_json(result)
        return
    cv = result["cv_mape"]
    click.echo(f"{model.mode}/{model.family}: f = {result['formula']}")
    click.echo(
        f"MAPE {result['mape']:.2f} %, CV MAPE "
        + (f"{cv:.2f} %" if cv is not None else "n/a")
        + (f", R² {result['r2']:.4f}" if result["r2"] is not None else "")
    )
    edge = " (still rising at --max-workers)" if model.peak_at_range_edge else ""
    click.echo(
        f"peak: {model.peak_workers} workers, {result['peak_ps']} PS, "
        f"{_rate(model.peak_throughput)}{edge}"
    )
    if output is not None:
        click.echo(f"wrote {output}")


# ------------------------------------------------------------------------------- compare


@throughput.command()
@_PROFILE
@click.option("--mode", type=MODE, required=True, help="Training mode of the job.")
@_RATIO
@_GLOBAL_BATCH
@_FOLDS
@_FOLD_SEED
@_JSON
def compare(
    profile_path: Path,
    mode: str,
    ratio: int,
    global_batch: float,
    folds: int,
    seed: int,
    as_json: bool,
) -> None:
    """Cross-validate every family (seed, linear, Optimus) on one profile."""
    from throughput.fit import compare_families, select_best
    from throughput.profile import load_profile

    with _library_errors():
        profile = load_profile(profile_path)
        fits = compare_families(
            profile, mode=mode, ratio=ratio, global_batch=global_batch, k=folds, seed=seed
        )
        best = select_best(fits).family.name
    result = {
        "mode": mode,
        "ratio": ratio,
        "best": best,
        "families": {f.family.name: f.row() for f in fits},
    }
    if as_json:
        emit_json(result)
        return
    rows = []
    for f in fits:
        r = f.row()
        rows.append(
            [
                f.family.name + ("" if f.family.selectable else " (comparison)"),
                "n/a" if r["cv_mape"] is None else f"{r['cv_mape']:.2f}",
                "n/a" if r["mape"] is None else f"{r['mape']:.2f}",
                f.family.n_params,
            ]
        )
    click.echo(table(rows, ["family", "cv_mape %", "mape %", "params"]))
    scored = [f for f in fits if f.family.selectable and not math.isnan(f.cv_mape)]
    lowest = min(scored, key=lambda f: f.cv_mape) if scored else None
    if lowest is not None and lowest.family.name != best:
        click.echo(
            f"best: {best} ({lowest.family.name}'s lower CV MAPE is within one standard error; "
            f"ties go to {best}, which is exact in ps)"
        )
    else:
        click.echo(f"best: {best}")


# ------------------------------------------------------------------------------- predict


@throughput.command()
@click.option("--model", "model_path", type=FILE_IN, required=True, help="Model JSON.")
@click.option(
    "--points",
    "points_path",
    type=FILE_IN,
    required=True,
    help="CSV of configurations: workers[,ps] (ps defaults to ceil(w/ratio)).",
)
@_JSON
def predict(model_path: Path, points_path: Path, as_json: bool) -> None:
    """Predict throughput at each configuration of a points CSV (input order kept)."""
    from throughput.model import ThroughputModel
    from throughput.profile import load_points

    with _library_errors():
        model = ThroughputModel.load(model_path)
        workers, ps = load_points(points_path)
        if ps is None:
            ps = -(-workers // model.ratio)
        values = model.throughput(workers, ps)
    result = [
        {"workers": int(w), "ps": int(p), "throughput": float(f)}
        for w, p, f in zip(workers, ps, values, strict=True)
    ]
    if as_json:
        emit_json(result)
        return
    click.echo(
        table(
            [[r["workers"], r["ps"], _rate(r["throughput"])] for r in result],
            ["workers", "ps", "throughput"],
        )
    )


# ---------------------------------------------------------------------------------- plan


@throughput.command("plan")
@click.option("--model", "model_path", type=FILE_IN, required=True, help="Model JSON.")
@click.option(
    "--load", type=float, required=True, callback=_non_negative, help="Load to serve, samples/s."
)
@click.option(
    "--backlog",
    type=float,
    default=0.0,
    show_default=True,
    callback=_non_negative,
    help="Samples already waiting, to drain on top of the load.",
)
@click.option(
    "--drain-within",
    callback=_duration,
    default=None,
    metavar="DURATION",
    help="Time budget to drain the backlog (e.g. 5m); required with --backlog.",
)
@click.option(
    "--min-workers",
    type=int,
    default=None,
    callback=_positive,
    help="Smallest allowed worker count (default: the model's).",
)
@click.option(
    "--max-workers",
    type=int,
    default=None,
    callback=_positive,
    help="Largest allowed worker count (default: the model's).",
)
@_JSON
def plan_cmd(
    model_path: Path,
    load: float,
    backlog: float,
    drain_within: float | None,
    min_workers: int | None,
    max_workers: int | None,
    as_json: bool,
) -> None:
    """Smallest worker count whose predicted throughput exceeds the load."""
    from throughput.model import ThroughputModel
    from throughput.solver import plan

    if backlog > 0 and drain_within is None:
        raise click.UsageError("--backlog needs --drain-within (e.g. --drain-within 5m)")
    with _library_errors():
        model = ThroughputModel.load(model_path)
        lo = model.min_workers if min_workers is None else min_workers
        hi = model.max_workers if max_workers is None else max_workers
        if lo > hi:
            raise UserError(f"--min-workers ({lo}) is above --max-workers ({hi})")
        try:
            result = plan(
                model,
                load,
                min_workers=lo,
                max_workers=hi,
                backlog=backlog,
                drain_within_s=drain_within,
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None
    if as_json:
        emit_json(result.as_dict())
        return
    head = f"{result.workers} workers, {result.ps} PS: {_rate(result.throughput)}"
    if result.saturated:
        click.echo(f"{head} — SATURATED: the peak cannot serve {_rate(result.needed_rate)}")
    else:
        click.echo(f"{head} > needed {_rate(result.needed_rate)}")


# ------------------------------------------------------------------------------ generate


@throughput.command()
@click.option("--mode", type=MODE, required=True, help="Training mode to simulate.")
@click.option(
    "--seed",
    type=int,
    default=1,
    show_default=True,
    help="Picks the simulated job (jittered constants) and the noise.",
)
@click.option(
    "--noise",
    type=float,
    default=0.03,
    show_default=True,
    callback=_non_negative,
    help="Log-normal measurement noise σ (0.03 ≈ 3 %).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 100),
    default=2,
    show_default=True,
    help="Measurements per on-ratio configuration.",
)
@_RATIO
@click.option(
    "--global-batch",
    type=int,
    default=4096,
    show_default=True,
    callback=_positive,
    help="Global batch M of the simulated synchronous job.",
)
@click.option("-o", "--output", type=FILE_OUT, required=True, help="Write the profile CSV here.")
def generate(
    mode: str, seed: int, noise: float, repeats: int, ratio: int, global_batch: int, output: Path
) -> None:
    """Simulate a profiling run of a CTR-style PS job (the seed's step-time physics + noise)."""
    from throughput.profile import save_profile
    from throughput.simulate import generate_profile

    with _library_errors():
        profile, truth = generate_profile(
            mode, seed=seed, noise=noise, repeats=repeats, ratio=ratio, global_batch=global_batch
        )
        try:
            save_profile(profile, output)
        except OSError as exc:
            raise UserError(f"{output}: cannot write ({exc.strerror or exc})") from None
    peak_w, peak_f = truth.peak(1, 2 * int(profile.workers.max()))
    click.echo(
        f"wrote {output}: {len(profile)} rows, {profile.n_configs} configurations "
        f"(true peak in 1–{2 * int(profile.workers.max())}: {peak_w} workers, {_rate(peak_f)})"
    )


# ---------------------------------------------------------------------------------- plot


@throughput.command()
@click.option("--model", "model_path", type=FILE_IN, required=True, help="Model JSON.")
@click.option("--profile", "profile_path", type=FILE_IN, required=True, help="Profile CSV.")
@click.option("-o", "--output", type=FILE_OUT, required=True, help="Image to write (.png, .svg).")
def plot(model_path: Path, profile_path: Path, output: Path) -> None:
    """Measured points vs the fitted curve at p = ceil(w/ratio), peak marked."""
    import numpy as np

    from throughput.model import ThroughputModel
    from throughput.profile import load_profile

    with _library_errors():
        model = ThroughputModel.load(model_path)
        profile = load_profile(profile_path).for_mode(model.mode)
        top = min(model.max_workers, max(int(profile.workers.max()), model.peak_workers) * 5 // 4)
        w = np.arange(model.min_workers, max(top, model.min_workers) + 1)
        curve = model.throughput(w, warn=False)
        on = profile.on_ratio(model.ratio)
    _draw(model, profile.workers, profile.throughput, on, w, curve, output)
    click.echo(f"wrote {output}")


def _draw(model: Any, pw: Any, pf: Any, on: Any, w: Any, curve: Any, output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.scatter(pw[on], pf[on], s=18, color="tab:blue", label=f"measured, ps = ⌈w/{model.ratio}⌉")
    if (~on).any():
        ax.scatter(
            pw[~on],
            pf[~on],
            s=18,
            facecolors="none",
            edgecolors="tab:gray",
            label="measured, other ps",
        )
    ax.plot(w, curve, color="tab:orange", lw=2, label=f"{model.mode}/{model.family} fit")
    pk_w, pk_f = model.peak_workers, model.peak_throughput
    if w[0] <= pk_w <= w[-1]:
        ax.axvline(pk_w, color="tab:red", ls=":", lw=1)
        ax.plot(
            [pk_w],
            [pk_f],
            marker="*",
            ms=14,
            color="tab:red",
            ls="none",
            label=f"peak: {pk_w} workers, {pk_f:,.0f}/s",
        )
    ax.set_xlabel("workers")
    ax.set_ylabel("throughput (samples/s)")
    cv = model.metrics.get("cv_mape")
    ax.set_title(
        f"{model.family_spec.formula()}" + (f"   CV MAPE {cv:.2f} %" if cv else ""), fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:
        with atomic_path(output, suffix=output.suffix or ".png") as tmp:
            fig.savefig(tmp)
    except (OSError, ValueError) as exc:
        raise UserError(f"{output}: cannot write image ({exc})") from None
    finally:
        plt.close(fig)
