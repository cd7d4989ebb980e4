"""``kale forecast``: backtest, fit, predict and plot the workload forecasters.

Thin on purpose: parse flags, call :mod:`forecasting`, print. ``predict``, ``fit`` and ``plot``
wrap the chosen model in the fallback wrapper (a too-short trace still gets a forecast, and
stderr says which model ran and why); ``backtest`` scores each model as it is. Every fit shows
progress on stderr: a bar whose clock moves on a terminal, one line per fit otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler.cli.trace import load_trace_cli
from autoscaler.errors import UserError
from autoscaler.terminal.flags import json_option
from autoscaler.terminal.output import emit_json, table, warn
from autoscaler.terminal.progress import FitProgress

if TYPE_CHECKING:
    import pandas as pd

    from forecasting.backtest import BacktestResult
    from forecasting.base import Forecaster


def _models(text: str, flag: str = "--models") -> list[str]:
    from forecasting.registry import ALL_NAMES

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"{flag}: give at least one model name")
    bad = [n for n in names if n not in ALL_NAMES]
    if bad:
        raise UserError(f"{flag}: unknown model {bad[0]!r} (choose from {', '.join(ALL_NAMES)})")
    return names


def _model(name: str) -> str:
    if "," in name:
        raise UserError(f"--model: give one model, got {name!r}")
    return _models(name, flag="--model")[0]


@dataclass(frozen=True)
class ModelOptions:
    """The flags every subcommand hands to the forecasters it builds."""

    horizon: int
    device: str
    seed: int
    epochs: int | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"horizon": self.horizon, "device": self.device, "seed": self.seed}
        out["progress"] = sys.stderr.isatty()  # kale's epoch bar, only where someone watches
        if self.epochs is not None:
            out["epochs"] = self.epochs
        return out

    def build(self, model: str, *, fallback: bool) -> Forecaster:
        from forecasting.registry import make_forecaster

        if fallback and model != "fallback":
            return make_forecaster("fallback", primary=model, **self.kwargs())
        return make_forecaster(model, **self.kwargs())


@contextlib.contextmanager
def _fallback_log_quiet() -> Iterator[None]:
    """Mute the fallback wrapper's log while fitting: the CLI prints the same reason as one
    ``kale: warning:`` line, and the log's bare copy would say it twice."""
    logger = logging.getLogger("forecasting.fallback")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


class _KaleWarningHandler(logging.Handler):
    """Library warnings (a primary that failed to predict) as ``kale: warning:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        # The kale model's own messages start with its name; one "kale:" is enough.
        warn(record.getMessage().removeprefix("kale: "))


def _route_library_warnings() -> None:
    """With a handler of its own the logger no longer falls back to logging's bare
    last-resort line; records still propagate, to whatever the caller configured."""
    logger = logging.getLogger("forecasting")
    if not any(isinstance(h, _KaleWarningHandler) for h in logger.handlers):
        logger.addHandler(_KaleWarningHandler(level=logging.WARNING))


def _fit(history: pd.Series, model: str, opts: ModelOptions, *, fallback: bool) -> Forecaster:
    """Fit one model on ``history`` (with progress); a too-short trace is the user's to fix."""
    from forecasting.base import InsufficientHistoryError

    with FitProgress(1, label="forecast") as progress:
        fc = progress.watch(opts.build(model, fallback=fallback), model)
        try:
            with _fallback_log_quiet():
                fc.fit(history)
        except (InsufficientHistoryError, ValueError) as exc:
            raise UserError(f"--trace: {exc}") from None
    summary = fc.fit_summary
    if summary.get("fallback"):
        warn(f"using {summary.get('model')}: {summary.get('reason')}")
    return fc


def _load(model_file: str) -> Forecaster:
    from forecasting.base import Forecaster, ForecastError

    try:
        return Forecaster.load(model_file)
    except (OSError, ForecastError) as exc:
        raise UserError(f"--model-file: {exc}") from None


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
    _route_library_warnings()


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

    names, opts = _models(models), ModelOptions(horizon, device, seed, epochs)
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
    as_json: bool,
) -> None:
    """Fit a model on the whole trace and save it (``predict --model-file`` reads it)."""
    name = _model(model)
    series = load_trace_cli(trace_path).series
    fc = _fit(series, name, ModelOptions(horizon, device, seed, epochs), fallback=not no_fallback)
    fc.save(output)
    if as_json:
        emit_json({"output": output, "fit_summary": fc.fit_summary})
    else:
        click.echo(
            f"wrote {output}: {fc.active_model}, fitted in "
            f"{fc.fit_summary.get('fit_seconds', 0):.1f} s on {len(series)} steps"
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

    name = _model(model)
    series = load_trace_cli(trace_path).series
    opts = ModelOptions(horizon, device, seed, epochs)
    fc = _load(model_file) if model_file else _fit(series, name, opts, fallback=not no_fallback)
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
    name = _model(model)
    series = load_trace_cli(trace_path).series
    cut = _cut_at(series, origin)
    history = series.iloc[:cut]
    fc = _fit(history, name, ModelOptions(horizon, device, seed, epochs), fallback=True)
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
