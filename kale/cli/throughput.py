"""``kale throughput``: fit, compare and use parameter-server throughput models.

Thin by design: each subcommand parses flags, calls one function of the ``throughput``
package and prints. The shared flags, and the mapping of ``throughput``'s errors to
:class:`UserError` (one line, exit code 2) and of its extrapolation warnings to
``kale: warning:`` lines, are in :mod:`kale.cli.throughput_options`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from common.numbers import format_percent, format_rate
from kale.cli.throughput_options import (
    FAMILY,
    FILE_IN,
    FILE_OUT,
    FOLD_SEED,
    FOLDS,
    GLOBAL_BATCH,
    MODE_OPTION,
    MODEL,
    PROFILE,
    RATIO,
    library_errors,
    ordered,
    workers_option,
)
from kale.terminal.flags import DURATION, json_option, non_negative, positive
from kale.terminal.output import emit_json, table

if TYPE_CHECKING:
    from throughput.model import ThroughputModel


@click.group()
def throughput() -> None:
    """Fit and use parameter-server throughput models (samples/s as a function of w, p)."""


@throughput.command()
@PROFILE
@MODE_OPTION
@RATIO
@click.option(
    "--family",
    type=FAMILY,
    default="auto",
    show_default=True,
    help="Model family; auto picks the seed family with the best CV MAPE.",
)
@GLOBAL_BATCH
@workers_option("--min-workers", "Smallest allowed worker count.", default=1)
@workers_option("--max-workers", "Largest allowed worker count (default: 2x the largest profiled).")
@FOLDS
@FOLD_SEED
@click.option("-o", "--output", type=FILE_OUT, default=None, help="Write the model JSON here.")
@json_option()
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
    from throughput.report import fit_report

    if max_workers is not None:
        ordered(min_workers, max_workers)
    with library_errors():
        model = fit_model(
            load_profile(profile_path),
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
        with library_errors(writing=output):
            model.save(output)
    result = fit_report(model, saved_to=None if output is None else str(output))
    if as_json:
        emit_json(result)
        return
    _print_fit(model, result)


def _print_fit(model: ThroughputModel, result: dict[str, Any]) -> None:
    cv, r2 = result["cv_mape"], result["r2"]
    click.echo(f"{model.mode}/{model.family}: f = {result['formula']}")
    click.echo(
        f"MAPE {format_percent(result['mape'] / 100)}, CV MAPE "
        + (format_percent(cv / 100) if cv is not None else "n/a")
        + (f", R² {r2:.4f}" if r2 is not None else "")
    )
    edge = " (still rising at --max-workers)" if model.peak_at_range_edge else ""
    click.echo(
        f"peak: {model.peak_workers} workers, {result['peak_ps']} PS, "
        f"{format_rate(model.peak_throughput)}{edge}"
    )
    if result["model"] is not None:
        click.echo(f"wrote {result['model']}")


@throughput.command()
@PROFILE
@MODE_OPTION
@RATIO
@GLOBAL_BATCH
@FOLDS
@FOLD_SEED
@json_option()
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
    from throughput.fit import compare_families
    from throughput.profile import load_profile
    from throughput.report import comparison

    with library_errors():
        fits = compare_families(
            load_profile(profile_path),
            mode=mode,
            ratio=ratio,
            global_batch=global_batch,
            k=folds,
            seed=seed,
        )
        result = comparison(fits, mode=mode, ratio=ratio)
    if as_json:
        emit_json(result.as_dict())
        return
    rows = [
        [
            f.family.name + ("" if f.family.selectable else " (comparison)"),
            f.cv_mape / 100,
            f.mape / 100,
            f.family.n_params,
        ]
        for f in fits
    ]
    click.echo(table(rows, ["family", "cv_mape", "mape", "params"], percent=("cv_mape", "mape")))
    note = result.tie_note
    click.echo(f"best: {result.best}" + (f" ({note})" if note else ""))


@throughput.command()
@MODEL
@click.option(
    "--points",
    "points_path",
    type=FILE_IN,
    required=True,
    help="CSV of configurations: workers[,ps] (ps defaults to ceil(w/ratio)).",
)
@json_option()
def predict(model_path: Path, points_path: Path, as_json: bool) -> None:
    """Predict throughput at each configuration of a points CSV (input order kept)."""
    from throughput.model import ThroughputModel
    from throughput.profile import load_points

    with library_errors():
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
    rows = [[r["workers"], r["ps"], r["throughput"]] for r in result]
    click.echo(table(rows, ["workers", "ps", "samples/s"]))


@throughput.command("plan")
@MODEL
@click.option(
    "--load", type=float, required=True, callback=non_negative, help="Load to serve, samples/s."
)
@click.option(
    "--backlog",
    type=float,
    default=0.0,
    show_default=True,
    callback=non_negative,
    help="Samples already waiting, to drain on top of the load.",
)
@click.option(
    "--drain-within",
    type=DURATION,
    callback=positive,
    default=None,
    help="Time budget to drain the backlog (e.g. 5m); required with --backlog.",
)
@workers_option("--min-workers", "Smallest allowed worker count (default: the model's).")
@workers_option("--max-workers", "Largest allowed worker count (default: the model's).")
@json_option()
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
    with library_errors():
        model = ThroughputModel.load(model_path)
        lo = model.min_workers if min_workers is None else min_workers
        hi = model.max_workers if max_workers is None else max_workers
        ordered(lo, hi)
        result = plan(
            model,
            load,
            min_workers=lo,
            max_workers=hi,
            backlog=backlog,
            drain_within_s=drain_within,
        )
    if as_json:
        emit_json(result.as_dict())
        return
    head = f"{result.workers} workers, {result.ps} PS: {format_rate(result.throughput)}"
    if result.saturated:
        click.echo(f"{head} — SATURATED: the peak cannot serve {format_rate(result.needed_rate)}")
    else:
        click.echo(f"{head} > needed {format_rate(result.needed_rate)}")


@throughput.command()
@MODE_OPTION
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
    callback=non_negative,
    help="Log-normal measurement noise σ (0.03 ≈ 3 %).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1, 100),
    default=2,
    show_default=True,
    help="Measurements per on-ratio configuration.",
)
@RATIO
@click.option(
    "--global-batch",
    type=int,
    default=4096,
    show_default=True,
    callback=positive,
    help="Global batch M of the simulated synchronous job.",
)
@click.option("-o", "--output", type=FILE_OUT, required=True, help="Write the profile CSV here.")
def generate(
    mode: str, seed: int, noise: float, repeats: int, ratio: int, global_batch: int, output: Path
) -> None:
    """Simulate a profiling run of a CTR-style PS job (the seed's step-time physics + noise)."""
    from throughput.profile import save_profile
    from throughput.simulate import generate_profile

    with library_errors():
        profile, truth = generate_profile(
            mode, seed=seed, noise=noise, repeats=repeats, ratio=ratio, global_batch=global_batch
        )
    with library_errors(writing=output):
        save_profile(profile, output)
    top = 2 * int(profile.workers.max())
    peak_w, peak_f = truth.peak(1, top)
    click.echo(
        f"wrote {output}: {len(profile)} rows, {profile.n_configs} configurations "
        f"(true peak in 1–{top}: {peak_w} workers, {format_rate(peak_f)})"
    )


@throughput.command()
@MODEL
@click.option("--profile", "profile_path", type=FILE_IN, required=True, help="Profile CSV.")
@click.option("-o", "--output", type=FILE_OUT, required=True, help="Image to write (.png, .svg).")
def plot(model_path: Path, profile_path: Path, output: Path) -> None:
    """Measured points vs the fitted curve at p = ceil(w/ratio), peak marked."""
    from throughput.model import ThroughputModel
    from throughput.plot import plot_fit
    from throughput.profile import load_profile

    with library_errors():
        model = ThroughputModel.load(model_path)
        profile = load_profile(profile_path)
    with library_errors(writing=output):
        plot_fit(model, profile, output)
    click.echo(f"wrote {output}")
