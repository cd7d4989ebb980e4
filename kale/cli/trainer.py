"""``kale train`` and ``kale profile``: thin commands over :mod:`trainer.session` and
:mod:`trainer.profile_job`.

``kale train`` runs one job's PS/worker processes until Ctrl-C, SIGTERM or ``--seconds``,
printing a throughput line every ``--report-every`` (JSON lines with ``--json``); on the way
out it drains the workers, checkpoints and leaves no process behind. The Local actuator
starts it as a child process and stops it with SIGTERM; a restart with other ``--workers`` /
``--ps`` resumes from the checkpoint and the committed offsets.

``kale profile`` measures throughput per configuration and the rescale duration, and writes
the profile CSV (``workers,ps,throughput,mode``) and the ``kale.rescale/v1`` JSON.

Bad input is a :class:`UserError` (one line, exit 2); Kafka that cannot be reached or a topic
that does not exist are user errors too (the job file or ``--bootstrap`` is wrong). The
output helpers come from :mod:`kale.terminal`, never from ``kale.cli`` (which
imports this module: that would be a cycle).
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from common.errors import MetricUnavailable
from common.numbers import format_number, format_rate
from kale.terminal.errors import user_errors
from kale.terminal.flags import (
    DURATION,
    bootstrap_servers,
    int_list,
    json_option,
    non_negative,
    positive,
)
from kale.terminal.output import emit_json, table, warn

if TYPE_CHECKING:
    from autoscaler.job.loading import LoadedJob
    from trainer.profile_job import ProfileJob
    from trainer.profiler import ProfileResult
    from trainer.session import TrainEvent

JOB_FILE = click.Path(dir_okay=False, path_type=Path)
_JOB = click.option(
    "--job", "job_path", type=JOB_FILE, required=True, help="ElasticTrainingJob YAML."
)


def _load_job(path: Path) -> LoadedJob:
    from autoscaler.job.loading import load_job

    # The throughput model and rescale files are not needed to train or to profile.
    return load_job(path, check_files=False)


# ----------------------------------------------------------------------------------- train


@click.command()
@_JOB
@click.option("--workers", type=int, required=True, callback=positive, help="Workers (w).")
@click.option(
    "--ps",
    type=int,
    default=None,
    callback=positive,
    help="Parameter servers (p); default ceil(w / spec.training.workersPerPS).",
)
@click.option(
    "--seconds",
    type=DURATION,
    default=None,
    callback=positive,
    help="Stop after this long (default: until Ctrl-C or SIGTERM).",
)
@click.option(
    "--bootstrap",
    default=None,
    callback=bootstrap_servers,
    help="host:port of Kafka; overrides the job's.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Checkpoint folder (default .kale/checkpoints/<job name>); resumed when present.",
)
@click.option(
    "--report-every",
    type=DURATION,
    default="5s",
    show_default=True,
    callback=positive,
    help="Interval of the throughput lines.",
)
@json_option("Print JSON lines instead of text.")
def train(
    job_path: Path,
    workers: int,
    ps: int | None,
    seconds: float | None,
    bootstrap: str | None,
    checkpoint_dir: Path | None,
    report_every: float,
    as_json: bool,
) -> None:
    """Train the job's CTR model on its Kafka topic with W workers and P parameter servers."""
    from trainer.config import TrainerConfig, validate_shape
    from trainer.session import stop_on_signals
    from trainer.session import train as run_training

    loaded = _load_job(job_path)
    ps = ps if ps is not None else -(-workers // loaded.job.spec.training.workers_per_ps)
    config = TrainerConfig.from_job(loaded, bootstrap=bootstrap, checkpoint_dir=checkpoint_dir)
    validate_shape(config.spec, config.mode, config.global_batch, workers, ps)

    def say(event: TrainEvent) -> None:
        click.echo(json.dumps(event.as_json()) if as_json else _train_line(event))

    stop = threading.Event()
    with stop_on_signals(stop), user_errors(MetricUnavailable):
        run_training(
            config,
            workers=workers,
            ps=ps,
            stop=stop,
            on_event=say,
            seconds=seconds,
            report_every=report_every,
        )


def _train_line(event: TrainEvent) -> str:
    """How each event of a training run reads on a terminal."""
    from trainer.session import Started, Throughput

    if isinstance(event, Started):
        c, launch = event.config, event.launch
        return (
            f"kale train: {c.mode} workers={event.workers} ps={event.ps} topic={c.topic} "
            f"group={c.group}: consuming after "
            f"{launch.start_s + launch.load_s + launch.stream_rebuild_s:.1f}s"
            + (" (resumed from the checkpoint)" if launch.restored else "")
        )
    if isinstance(event, Throughput):
        loss = "     -" if math.isnan(event.loss) else f"{event.loss:.4f}"
        return (
            f"{event.elapsed_s:7.1f}s  w={event.workers} p={event.ps}  "
            f"{format_rate(event.samples_per_s):>17}  loss {loss}  "
            f"trained {format_number(event.trained)}" + ("  (topic idle)" if event.idle else "")
        )
    down = event.down
    return (
        f"kale train: stopped; trained {event.trained:,} samples; checkpoint "
        f"{down.manifest} (drain {down.drain_s:.2f}s, checkpoint {down.checkpoint_s:.2f}s)"
    )


# --------------------------------------------------------------------------------- profile


@click.command()
@_JOB
@click.option("--workers", "workers", required=True, callback=int_list, help="e.g. 1,2,3,4")
@click.option("--ps", "ps", default="1", show_default=True, callback=int_list, help="e.g. 1,2")
@click.option(
    "--seconds",
    type=DURATION,
    default="30s",
    show_default=True,
    callback=positive,
    help="Measured window per configuration.",
)
@click.option(
    "--warmup",
    type=DURATION,
    default="5s",
    show_default=True,
    callback=non_negative,
    help="Discarded time after each start or resize.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Profile CSV to write (workers,ps,throughput,mode).",
)
@click.option(
    "--rescales",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Resizes to time at least (0: no rescale measurement).",
)
@click.option(
    "--rescale-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Rescale JSON (default: the job's spec.rescale.measurement, else <output>.rescale.json).",
)
@click.option(
    "--bootstrap",
    default=None,
    callback=bootstrap_servers,
    help="Profile against this Kafka (default: an embedded broker started for the run).",
)
@click.option(
    "--partitions",
    type=int,
    default=None,
    callback=positive,
    help="Partitions of the profile topic (default: 2 x the largest worker count, >= 4).",
)
@json_option()
def profile(
    job_path: Path,
    workers: tuple[int, ...],
    ps: tuple[int, ...],
    seconds: float,
    warmup: float,
    output: Path,
    rescales: int,
    rescale_out: Path | None,
    bootstrap: str | None,
    partitions: int | None,
    as_json: bool,
) -> None:
    """Measure throughput per (workers, ps) and the rescale duration on a real stream."""
    from autoscaler.kafka.local.broker import BrokerStartError
    from trainer import profile_job
    from trainer.profiler import ProfileSettings

    settings = ProfileSettings(
        workers=workers,
        ps=ps,
        seconds=seconds,
        warmup_s=warmup,
        rescales=rescales,
        partitions=partitions,
    )
    plan = profile_job.plan_profile(
        _load_job(job_path), settings, output=output, rescale_out=rescale_out
    )
    with (
        _profile_bar(len(settings.configs)) as progress,
        user_errors(MetricUnavailable),
        user_errors(BrokerStartError, prefix="cannot start the embedded broker: "),
    ):
        result = profile_job.profile(plan, settings, bootstrap=bootstrap, on_progress=progress)
    with user_errors(OSError, prefix="cannot write the results: "):
        profile_job.save(plan, result)
    if as_json:
        emit_json(profile_job.as_json(plan, result))
    else:
        _print_profile(plan, result)
    for note in result.notes:
        warn(note)


@contextlib.contextmanager
def _profile_bar(total: int) -> Iterator[Callable[[str, dict[str, Any]], None]]:
    """A tqdm bar over the configurations (stderr; silent when it is not a terminal)."""
    from tqdm import tqdm

    with tqdm(
        total=total, desc="kale profile", unit="config", file=sys.stderr, disable=None
    ) as bar:

        def progress(kind: str, info: dict[str, Any]) -> None:
            if kind == "row":
                bar.update(1)
                rate = format_number(info["throughput"])
                bar.set_postfix_str(f"w={info['workers']} p={info['ps']} {rate}/s")
            else:
                bar.set_postfix_str(f"resized in {info['total_s']:.1f}s")

        yield progress


def _print_profile(plan: ProfileJob, result: ProfileResult) -> None:
    rows = [
        (r.workers, r.ps, r.throughput, r.loss, r.steps, "stream-bound" if r.stream_bound else "")
        for r in result.rows
    ]
    click.echo(table(rows, ["workers", "ps", "samples/s", "loss", "steps", "note"]))
    click.echo(f"profile: {plan.output}")
    if result.rescale is not None:
        m = result.rescale
        phases = ", ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in m.phases.items())
        click.echo(
            f"rescale: median {m.median_s:.2f}s, max {m.max_s:.2f}s over {len(m.samples)} "
            f"resizes ({phases}) -> {plan.rescale_out}"
        )
