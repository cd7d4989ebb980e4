"""``kale forecast``: backtest, fit, predict and plot the workload forecasters.

Thin on purpose: parse flags, call :mod:`forecasting`, print. ``predict``, ``fit`` and ``plot``
wrap the chosen model in the fallback wrapper (a too-short trace still gets a forecast, and
stderr says which model ran and why); ``backtest`` scores each model as it is. Every fit shows
progress on stderr: a bar whose clock moves on a terminal, one line per fit otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from common.errors import UserError
from kale.cli.forecasters import (
    ModelOptions,
    fit_model,
    load_model,
    model_names,
    one_model,
    refit_model,
    route_library_warnings,
)
from kale.cli.trace import load_trace_cli
from kale.terminal.flags import json_option
from kale.terminal.output import emit_json, table, warn
from kale.terminal.progress import FitProgress

if TYPE_CHECKING:
    import pandas as pd

    from forecasting.backtest import BacktestResult
    from forecasting.base import Forecaster


device_option = click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Where kale trains (cuda falls back to cpu with a warning when no GPU is there).",
)
seed_option = click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for kale's training."
)
epochs_option = click.option(
    "--epochs",
    type=click.IntRange(min=1),
    default=None,
    help="Cap on kale's training epochs (default 20; early stopping usually ends sooner).",
)
horizon_option = click.option(
    "--horizon",
    type=click.IntRange(min=1),
    default=60,
    show_default=True,
    help="Steps to forecast.",
)
trace_option = click.option(
    "--trace", "trace_path", type=click.Path(), required=True, help="Trace CSV (timestamp,value)."
)
model_option = click.option("--model", "model", default="kale", show_default=True)
no_fallback_option = click.option(
    "--no-fallback", is_flag=True, help="Fail instead of using a simpler model."
)


@click.group()
def forecast() -> None:
    """Forecast a trace's arrival rate, backtest the models, plot a forecast."""
    route_library_warnings()


@forecast.command("backtest")
@trace_option
@click.option(
    "--models",
    default="kale,seasonal_naive,ets,stl_ets,dlinear",
    show_default=True,
    help="Comma-separated model names.",
)
@horizon_option
@click.option(
    "--folds",
    type=click.IntRange(min=1),
    default=7,
    show_default=True,
    help="Forecast origins, spread evenly over the test window.",
)
@click.option(
    "--test-days",
    type=click.FloatRange(min=0, min_open=True),
    default=7.0,
    show_default=True,
    help="Length of the test window at the end of the trace.",
)
@device_option
@seed_option
@epochs_option
@json_option("Print JSON.")
def backtest_cmd(
    trace_path: str,
    models: str,
    horizon: int,
    folds: int,
    test_days: float,
    device: str,
    seed: int,
    epochs: int | None,
    as_json: bool,
) -> None:
    """Fit each model once before the test window, forecast at each origin, score."""
    from forecasting.backtest import backtest, origin_positions

    names, opts = model_names(models), ModelOptions(horizon, device, seed, epochs)
    trace = load_trace_cli(trace_path)
    try:
        origin_positions(
            len(trace.series), trace.interval_s, horizon=horizon, folds=folds, test_days=test_days
        )
    except ValueError as exc:
        raise UserError(f"--test-days/--horizon: {exc}") from None
    with FitProgress(len(names), label="backtest") as progress:
        factories = {n: _watched(progress, opts, n) for n in names}
        result = backtest(
            trace.series,
            factories,
            horizon=horizon,
            folds=folds,
            test_days=test_days,
            progress=_fold_progress(),
        )
    _report_backtest(result, trace.series.index[0], test_days, horizon, as_json=as_json)


def _watched(progress: FitProgress, opts: ModelOptions, name: str) -> Callable[[], Forecaster]:
    """A factory of fresh ``name`` models whose fits ``progress`` shows."""
    return lambda: progress.watch(opts.build(name, fallback=False), name)


def _report_backtest(
    result: BacktestResult, start: pd.Timestamp, test_days: float, horizon: int, *, as_json: bool
) -> None:
    """Print the scores; exit 2 when nothing could be scored because the split left too
    little to fit on (the user's to change, like a bad flag), 1 for any other failure."""
    failed = _warn_failed_models(result, start, test_days)
    out = result.to_dict()
    if as_json:
        emit_json(out)
    else:
        _print_backtest_table(out, test_days, horizon)
    if len(failed) == len(result.models):
        short = all(e.startswith("InsufficientHistoryError") for e in failed)
        raise click.exceptions.Exit(2 if short else 1)


def _fold_progress() -> Callable[[Iterable[Any], str], Iterable[Any]] | None:
    """A bar over each model's forecast origins (on a terminal only)."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    def wrap(items: Iterable[Any], name: str) -> Iterable[Any]:
        return tqdm(items, desc=f"backtest {name}", unit="fold", leave=False)

    return wrap


def _warn_failed_models(result: BacktestResult, start: pd.Timestamp, test_days: float) -> list[str]:
    """Say on stderr which models could not be scored, and why; return their errors.

    The JSON keeps its shape (null metrics plus ``error``), so a script reads the same
    document; a person sees the reason without reading it, and a hint when the cause is the
    split: every model is fitted only on the data before the test window.
    """
    fit_days = (result.fit_end - start).total_seconds() / 86400.0
    failed: list[str] = []
    for name, res in result.models.items():
        if not res.error:
            continue
        failed.append(res.error)
        hint = ""
        if res.error.startswith("InsufficientHistoryError"):
            hint = (
                f" (the models are fitted on the {fit_days:.3g} days before the last "
                f"{test_days:g}; use a shorter --test-days or a longer trace)"
            )
        warn(f"{name} was not scored: {res.error}{hint}")
    return failed


def _print_backtest_table(out: dict[str, Any], test_days: float, horizon: int) -> None:
    keys = ("mase", "smape", "mae", "rmse", "p90_coverage", "pinball", "fit_seconds", "predict_ms")
    rows = [
        [name, *[m.get(k) for k in keys], m.get("error") or m.get("model_used", name)]
        for name, m in out["models"].items()
    ]
    click.echo(table(rows, ["model", *keys, "ran"], percent=("p90_coverage",)))
    click.echo(
        f"{out['folds']} origins over the last {test_days:g} days, horizon {horizon}, "
        f"fitted on data before {out['fit_end']}"
    )


@forecast.command("fit")
@trace_option
@model_option
@horizon_option
@device_option
@seed_option
@epochs_option
@no_fallback_option
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="Model file to write."
)
@click.option(
    "--from",
    "previous_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Refit a model saved by 'kale forecast fit' on the trace, starting from its last fit "
    "where the data allows (its settings are kept; --model and the training flags are "
    "ignored).",
)
@json_option("Print the fit summary as JSON.")
def fit_cmd(
    trace_path: str,
    model: str,
    horizon: int,
    device: str,
    seed: int,
    epochs: int | None,
    no_fallback: bool,
    output: str,
    previous_file: str | None,
    as_json: bool,
) -> None:
    """Fit a model on the whole trace and save it (``predict --model-file`` reads it)."""
    name = one_model(model)
    series = load_trace_cli(trace_path).series
    fc = (
        refit_model(series, previous_file)
        if previous_file
        else fit_model(
            series, name, ModelOptions(horizon, device, seed, epochs), fallback=not no_fallback
        )
    )
    fc.save(output)
    if as_json:
        emit_json({"output": output, "fit_summary": fc.fit_summary})
    else:
        refit = fc.fit_summary.get("refit")
        how = f" ({refit['mode']} refit: {refit['reason']})" if refit else ""
        click.echo(
            f"wrote {output}: {fc.active_model}, fitted in "
            f"{fc.fit_summary.get('fit_seconds', 0):.1f} s on {len(series)} steps{how}"
        )


@forecast.command("predict")
@trace_option
@model_option
@click.option(
    "--model-file",
    type=click.Path(dir_okay=False),
    help="Use a model saved by 'kale forecast fit' instead of fitting.",
)
@horizon_option
@device_option
@seed_option
@epochs_option
@no_fallback_option
@json_option("Print JSON.")
def predict_cmd(
    trace_path: str,
    model: str,
    model_file: str | None,
    horizon: int,
    device: str,
    seed: int,
    epochs: int | None,
    no_fallback: bool,
    as_json: bool,
) -> None:
    """Forecast the steps after the end of the trace."""
    from forecasting.base import ForecastError

    name = one_model(model)
    series = load_trace_cli(trace_path).series
    opts = ModelOptions(horizon, device, seed, epochs)
    fc = (
        load_model(model_file)
        if model_file
        else fit_model(series, name, opts, fallback=not no_fallback)
    )
    try:
        result = fc.predict(horizon, history=series)
    except (ForecastError, ValueError) as exc:
        raise UserError(f"--trace: {exc}") from None
    if as_json:
        emit_json(result.to_dict())
        return
    rows = [
        [ts.isoformat().replace("+00:00", "Z"), r["mean"], r["p10"], r["p50"], r["p90"]]
        for ts, r in result.to_frame().iterrows()
    ]
    click.echo(table(rows, ["timestamp", "mean", "p10", "p50", "p90"]))


@forecast.command("plot")
@trace_option
@model_option
@horizon_option
@click.option(
    "--origin",
    help="Forecast from this ISO time (fitted on data before it); default: the end of the trace.",
)
@click.option(
    "--history-days",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="How much history to draw.",
)
@device_option
@seed_option
@epochs_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    required=True,
    help="Picture to write: .png or .html.",
)
def plot_cmd(
    trace_path: str,
    model: str,
    horizon: int,
    origin: str | None,
    history_days: float,
    device: str,
    seed: int,
    epochs: int | None,
    output: str,
) -> None:
    """Draw recent history, the forecast and its p10–p90 band (and the actual, if known)."""
    import pandas as pd

    from forecasting.plot import FORMATS, plot_forecast

    if Path(output).suffix.lower() not in FORMATS:
        raise UserError(f"-o/--output: {output}: use a .png or .html file")
    name = one_model(model)
    series = load_trace_cli(trace_path).series
    cut = _cut_at(series, origin)
    history = series.iloc[:cut]
    fc = fit_model(history, name, ModelOptions(horizon, device, seed, epochs), fallback=True)
    result = fc.predict(horizon, history=history)
    shown = history[history.index > history.index[-1] - pd.Timedelta(days=history_days)]
    title = f"{Path(trace_path).name}: {result.model}, {horizon} steps"
    plot_forecast(shown, result, output, actual=series.iloc[cut : cut + horizon], title=title)
    click.echo(f"wrote {output}")


def _cut_at(series: pd.Series, origin: str | None) -> int:
    """The position of ``origin`` in the trace (its end when not given)."""
    import pandas as pd

    if not origin:
        return len(series)
    try:
        ts = pd.Timestamp(origin)
    except ValueError:
        raise UserError(f"--origin: {origin!r} is not an ISO-8601 time") from None
    ts = ts.tz_localize("UTC") if ts.tz is None else ts.tz_convert("UTC")
    cut = int(series.index.searchsorted(ts))
    if cut < 2 or cut >= len(series):
        raise UserError(
            f"--origin: {origin} is outside the trace ({series.index[0]} .. {series.index[-1]})"
        )
    return cut
