"""``kale trace``: make and inspect the arrival-rate traces everything else consumes."""

from __future__ import annotations

import warnings

import click

from autoscaler.sim.traces import Trace, load_trace, save_trace, trace_info
from common.errors import UserError
from common.numbers import format_number
from kale.terminal.flags import DURATION, json_option, positive
from kale.terminal.output import emit_json, table, warn


def load_trace_cli(path: str) -> Trace:
    """Load a trace, showing gap-filling warnings as one line on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(path)
    for w in caught:
        warn(str(w.message))
    return trace


@click.group()
def trace() -> None:
    """Generate and inspect arrival-rate traces (CSV: timestamp,value in samples/s)."""


@trace.command("generate")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), default=28, show_default=True)
@click.option(
    "--interval",
    type=DURATION,
    default="60s",
    show_default=True,
    callback=positive,
    help="Step: seconds or a duration (60, 5m, 1h).",
)
@click.option(
    "--peak-trough",
    type=click.FloatRange(min=1),
    default=20,
    show_default=True,
    help="Max/min of the mean daily profile.",
)
@click.option(
    "--peak",
    type=click.FloatRange(min=0, min_open=True),
    default=1000,
    show_default=True,
    help="Nominal evening peak in samples/s.",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--start",
    default="2026-01-05T00:00:00Z",
    show_default=True,
    help="First timestamp (a Monday by default).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
@json_option("Print the trace's summary as JSON.")
def generate(
    days: float,
    interval: float,
    peak_trough: float,
    peak: float,
    seed: int,
    start: str,
    output: str,
    as_json: bool,
) -> None:
    """Write a realistic synthetic trace (daily + weekly seasonality, trend, bursts, noise)."""
    from autoscaler.sim.tracegen import generate_trace

    try:
        series = generate_trace(
            days=days,
            interval_s=interval,
            peak_trough=peak_trough,
            seed=seed,
            peak=peak,
            start=start,
        )
    except ValueError as exc:
        raise UserError(f"trace generate: {exc}") from None
    save_trace(series, output)
    info = trace_info(Trace(series=series, interval_s=interval, path=output))
    if as_json:
        emit_json({"output": output, **info})
    else:
        click.echo(
            f"wrote {output}: {info['rows']} rows, {info['interval_s']:g} s interval, "
            f"peak/trough {format_number(info['peak_trough_ratio'])}"
        )


@trace.command("info")
@click.argument("file", type=click.Path())
@json_option()
def info(file: str, as_json: bool) -> None:
    """Summarise a trace: size, range, peak/trough ratio, seasonality."""
    data = trace_info(load_trace_cli(file))
    if as_json:
        emit_json(data)
        return
    rows = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
    click.echo(table(rows, ["field", "value"]))


@trace.command("resample")
@click.argument("file", type=click.Path())
@click.option(
    "--interval",
    type=DURATION,
    required=True,
    callback=positive,
    help="Step of the regular grid: seconds or a duration (60, 5m, 1h).",
)
@click.option(
    "--how",
    type=click.Choice(["mean", "sum"]),
    default="mean",
    show_default=True,
    help="mean: the values are rates (samples/s); sum: they are counts per row.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
@json_option("Print what was written as JSON.")
def resample(file: str, interval: float, how: str, output: str, as_json: bool) -> None:
    """Put a trace with irregular timestamps (scrape jitter, rows out of order or repeated)
    on a regular grid, so that every other command can read it."""
    from autoscaler.sim.traces import resample_points

    series, counts = resample_points(file, interval, how=how)
    save_trace(series, output)
    out = {"output": output, "interval_s": interval, "how": how, **counts}
    if as_json:
        emit_json(out)
        return
    empty = counts["empty_steps"]
    note = f", {empty} empty (filled by interpolation when loaded)" if empty else ""
    click.echo(
        f"wrote {output}: {counts['steps']} steps of {interval:g} s from "
        f"{counts['rows']} rows{note}"
    )
