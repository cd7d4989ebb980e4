"""``kale broker``, ``kale replay``, ``kale meter``: thin commands over ``autoscaler.kafka``.

Each maps flags to one library call and Kafka failures to a one-line user error (exit 2):
a broker that cannot be reached or a missing topic is something the user can fix, and the
library already bounds every wait, so these commands never hang.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from common.errors import MetricUnavailable, UserError
from common.numbers import format_number
from kale.terminal.errors import user_errors
from kale.terminal.flags import DURATION, bootstrap_servers, json_option, positive
from kale.terminal.output import emit_json, table, warn

if TYPE_CHECKING:
    from autoscaler.kafka.local.replay import RecordFactory

_BOOTSTRAP = click.option(
    "--bootstrap",
    required=True,
    callback=bootstrap_servers,
    help="Kafka bootstrap server, HOST:PORT.",
)


# -- kale broker -------------------------------------------------------------------------


@click.command(name="broker")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one)."
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write tansu's output here (default: a temporary file).",
)
def broker(port: int | None, log_path: Path | None) -> None:
    """Run the embedded Kafka broker (tansu, in-memory) on 127.0.0.1 until Ctrl-C.

    Prints ``bootstrap: 127.0.0.1:PORT`` once it answers Kafka requests.
    """
    from autoscaler.kafka.local.broker import BrokerStartError, EmbeddedBroker

    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        try:
            embedded = EmbeddedBroker(port=port, log_path=log_path).start()
        except BrokerStartError as exc:
            raise UserError(f"cannot start the broker: {exc}") from exc
        try:
            click.echo(f"bootstrap: {embedded.bootstrap}")
            sys.stdout.flush()  # the line a script waits for, before anything else
            click.echo(f"kale: tansu log: {embedded.log_path} (Ctrl-C to stop)", err=True)
            while not stop.wait(0.5):
                if not embedded.running():
                    raise UserError(f"the broker exited unexpectedly; log: {embedded.log_path}")
        finally:
            embedded.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- kale replay -------------------------------------------------------------------------


@click.command(name="replay")
@click.option(
    "--trace", "trace_path", required=True, type=click.Path(path_type=Path), help="Trace file."
)
@_BOOTSTRAP
@click.option("--topic", required=True, help="Topic to produce to (created if missing).")
@click.option(
    "--speedup",
    type=float,
    default=1.0,
    show_default=True,
    callback=positive,
    help="Trace seconds per wall second.",
)
@click.option(
    "--scale",
    type=float,
    default=1.0,
    show_default=True,
    callback=positive,
    help="Multiply the trace's rate by this.",
)
@click.option(
    "--duration", type=DURATION, default=None, callback=positive, help="Stop after this wall time."
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Partitions when the topic is created.",
)
@click.option(
    "--timestamps",
    type=click.Choice(["wall", "trace"]),
    default="wall",
    show_default=True,
    help="Record timestamps: send time, or the trace time each record stands for.",
)
@click.option(
    "--records",
    type=click.Choice(["plain", "ctr"]),
    default="plain",
    show_default=True,
    help="Record payload: a small counter record, or a synthetic CTR sample (feature ids + "
    "click label) that `kale train` learns from.",
)
@click.option(
    "--fields",
    type=click.IntRange(min=1, max=255),
    default=8,
    show_default=True,
    help="--records ctr: categorical fields per sample (the trainer's model must match).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="--records ctr: seed of the hidden click model and the feature ids.",
)
@click.option("--progress/--no-progress", default=True, help="Progress bar (only on a terminal).")
@json_option("Print the summary as JSON.")
def replay(
    trace_path: Path,
    bootstrap: str,
    topic: str,
    speedup: float,
    scale: float,
    duration: float | None,
    partitions: int,
    timestamps: Literal["wall", "trace"],
    records: str,
    fields: int,
    seed: int,
    progress: bool,
    as_json: bool,
) -> None:
    """Produce records to Kafka at a trace's rate (time compressed by --speedup)."""
    from autoscaler.kafka import clients
    from autoscaler.kafka.local.replay import replay as run_replay
    from autoscaler.sim.traces import load_trace

    trace = load_trace(trace_path)
    with user_errors(MetricUnavailable), user_errors(ValueError, prefix=f"{trace_path}: "):
        clients.ensure_topic(bootstrap, topic, partitions)
        summary = run_replay(
            trace.series,
            bootstrap,
            topic,
            speedup=speedup,
            scale=scale,
            duration_s=duration,
            progress=progress,
            timestamps=timestamps,
            interval_s=trace.interval_s,
            record_factory=_record_factory(records, seed=seed, fields=fields),
        )
    if as_json:
        emit_json(summary.as_dict())
        return
    click.echo(
        f"sent {summary.records_sent} records to {topic} in {summary.wall_s:.1f}s "
        f"({format_number(summary.achieved_rate)}/s; trace {summary.trace_start} .. "
        f"{summary.trace_end})"
    )
    if summary.records_failed:
        warn(f"{summary.records_failed} records failed")


def _record_factory(records: str, *, seed: int, fields: int) -> RecordFactory | None:
    """``ctr``: the trainer's record format (numpy only; no torch is loaded here)."""
    if records != "ctr":
        return None
    from trainer.records import make_record_factory

    return make_record_factory(seed, fields=fields)


# -- kale meter --------------------------------------------------------------------------


@click.command(name="meter")
@_BOOTSTRAP
@click.option("--topic", required=True, help="Topic to measure.")
@click.option("--group", required=True, help="Consumer group whose progress to measure.")
@click.option(
    "--window",
    type=DURATION,
    default="10s",
    show_default=True,
    callback=positive,
    help="Rate window (or the time since the last stored sample, with --history).",
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite history file (kept across runs; backfilled from the broker on first use).",
)
@json_option("Print the sample as JSON.")
def meter(
    bootstrap: str,
    topic: str,
    group: str,
    window: float,
    history_path: Path | None,
    as_json: bool,
) -> None:
    """Measure a topic's arrival rate and a group's consumption rate, lag and oldest age."""
    from autoscaler.kafka.history import HistoryError
    from autoscaler.kafka.meter import KafkaMeter

    with (
        user_errors(MetricUnavailable, HistoryError),
        KafkaMeter(bootstrap, topic, group, history_path=history_path, window_s=window) as m,
    ):
        sample = m.sample()
    if as_json:
        emit_json({"topic": topic, "group": group, **sample.as_dict()})
        return
    rows = [
        ("arrival_rate", f"{format_number(sample.arrival_rate)}/s"),
        ("consumption_rate", f"{format_number(sample.consumption_rate)}/s"),
        ("lag", format_number(sample.lag)),
        ("oldest_unconsumed_age_s", format_number(sample.oldest_unconsumed_age_s)),
        ("partitions", format_number(sample.partitions)),
        ("window_s", format_number(sample.window_s)),
    ]
    click.echo(table(rows, headers=[f"{topic} / {group}", "value"]))
