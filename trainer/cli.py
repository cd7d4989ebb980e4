"""``kale train`` and ``kale profile``: thin commands over :mod:`trainer.launcher` and
:mod:`trainer.profiler`.

``kale train`` runs one job's PS/worker processes until Ctrl-C, SIGTERM or ``--seconds``,
printing a throughput line every ``--report-every`` (JSON lines with ``--json``); on the way
out it drains the workers, checkpoints and leaves no process behind. The Local actuator
starts it as a child process and stops it with SIGTERM; a restart with other ``--workers`` /
``--ps`` resumes from the checkpoint and the committed offsets.

``kale profile`` measures throughput per configuration and the rescale duration, and writes
the profile CSV (``workers,ps,throughput,mode``) and the ``kale.rescale/v1`` JSON.

Bad input is a :class:`UserError` (one line, exit 2); Kafka that cannot be reached or a topic
that does not exist are user errors too (the job file or ``--bootstrap`` is wrong).
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from autoscaler.cli.output import emit_json, table
from autoscaler.cli.params import DURATION
from autoscaler.errors import MetricUnavailable, UserError

JOB_FILE = click.Path(dir_okay=False, path_type=Path)


def _positive_int(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and value < 1:
        raise click.BadParameter("must be a positive integer")
    return value


def _positive_duration(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter("must be a positive duration")
    return value


def _int_list(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    out: list[int] = []
    for part in value.split(","):
        text = part.strip()
        if not text.isdigit() or int(text) < 1:
            raise click.BadParameter(
                f"expected comma-separated positive integers such as 1,2,4; got {text!r}"
            )
        if int(text) not in out:
            out.append(int(text))
    return tuple(out)


def _load_job(path: Path) -> Any:
    from autoscaler.config import load_job

    # The throughput model and rescale files are not needed to train or to profile.
    return load_job(path, check_files=False)


@contextlib.contextmanager
def _kafka_errors(bootstrap: str) -> Iterator[None]:
    """Kafka that is down or a missing topic is the user's to fix: one line, exit 2."""
    try:
        yield
    except MetricUnavailable as exc:
        raise UserError(str(exc)) from None


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (a second SIGINT interrupts for real)."""

    def on_term(_sig: int, _frame: Any) -> None:
        stop.set()

    def on_int(_sig: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in ((signal.SIGTERM, on_term), (signal.SIGINT, on_int))
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------------- train


@click.command()
@click.option("--job", "job_path", type=JOB_FILE, required=True, help="ElasticTrainingJob YAML.")
@click.option("--workers", type=int, required=True, callback=_positive_int, help="Workers (w).")
@click.option(
    "--ps",
    type=int,
    default=None,
    callback=_positive_int,
    help="Parameter servers (p); default ceil(w / spec.training.workersPerPS).",
)
@click.option(
    "--seconds",
    type=DURATION,
    default=None,
    callback=_positive_duration,
    help="Stop after this long (default: until Ctrl-C or SIGTERM).",
)
@click.option("--bootstrap", default=None, help="host:port of Kafka; overrides the job's.")
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
    callback=_positive_duration,
    help="Interval of the throughput lines.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of text.")
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
    from trainer.launcher import Trainer, TrainerConfig, validate_shape

    loaded = _load_job(job_path)
    ratio = loaded.job.spec.training.workers_per_ps
    ps = ps if ps is not None else -(-workers // ratio)
    config = TrainerConfig.from_job(loaded, bootstrap=bootstrap, checkpoint_dir=checkpoint_dir)
    validate_shape(config.spec, config.mode, config.global_batch, workers, ps)

    def say(record: dict[str, Any], text: str) -> None:
        click.echo(json.dumps(record) if as_json else text)

    stop = threading.Event()
    trainer = Trainer(config, workers=workers, ps=ps)
    began = time.monotonic()
    with _stop_on_signals(stop), _kafka_errors(config.bootstrap):
        try:
            launch = trainer.start()
            say(
                {
                    "event": "started",
                    "workers": workers,
                    "ps": ps,
                    "mode": config.mode,
                    "topic": config.topic,
                    "group": config.group,
                    **launch.__dict__,
                },
                f"kale train: {config.mode} workers={workers} ps={ps} topic={config.topic} "
                f"group={config.group}: consuming after "
                f"{launch.start_s + launch.load_s + launch.stream_rebuild_s:.1f}s"
                + (" (resumed from the checkpoint)" if launch.restored else ""),
            )
            deadline = None if seconds is None else time.monotonic() + seconds
            last_t, last_n = time.monotonic(), trainer.samples_total
            while not stop.is_set():
                wait = report_every
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                if trainer.idle(wait, until=stop.is_set):
                    break
                now, n = time.monotonic(), trainer.samples_total
                rate = (n - last_n) / max(now - last_t, 1e-9)
                loss = trainer.mean_loss(last_t, now)
                say(
                    {
                        "event": "throughput",
                        "elapsed_s": round(now - began, 3),
                        "workers": workers,
                        "ps": ps,
                        "samples_per_s": rate,
                        "trained": n,
                        "loss": None if math.isnan(loss) else loss,
                    },
                    f"{now - began:7.1f}s  w={workers} p={ps}  {rate:10,.0f} samples/s  "
                    f"loss {'     -' if math.isnan(loss) else f'{loss:.4f}'}  trained {n:,}"
                    + ("  (topic idle)" if n == last_n else ""),
                )
                last_t, last_n = now, n
                if deadline is not None and now >= deadline:
                    break
            down = trainer.stop()
        finally:
            trainer.close()
    say(
        {
            "event": "stopped",
            "trained": trainer.samples_total,
            "commit_failures": trainer.commit_failures,
            "checkpoint": str(down.manifest) if down.manifest else None,
            "drain_s": down.drain_s,
            "checkpoint_s": down.checkpoint_s,
        },
        f"kale train: stopped; trained {trainer.samples_total:,} samples; checkpoint "
        f"{down.manifest} (drain {down.drain_s:.2f}s, checkpoint {down.checkpoint_s:.2f}s)",
    )


# --------------------------------------------------------------------------------- profile


@click.command()
@click.option("--job", "job_path", type=JOB_FILE, required=True, help="ElasticTrainingJob YAML.")
@click.option("--workers", "workers", required=True, callback=_int_list, help="e.g. 1,2,3,4")
@click.option("--ps", "ps", default="1", show_default=True, callback=_int_list, help="e.g. 1,2")
@click.option(
    "--seconds",
    type=DURATION,
    default="30s",
    show_default=True,
    callback=_positive_duration,
    help="Measured window per configuration.",
)
@click.option(
    "--warmup",
    type=DURATION,
    default="5s",
    show_default=True,
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
    help="Profile against this Kafka (default: an embedded broker started for the run).",
)
@click.option(
    "--partitions",
    type=int,
    default=None,
    callback=_positive_int,
    help="Partitions of the profile topic (default: 2 x the largest worker count, >= 4).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
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
    from throughput.profile import save_profile
    from trainer.launcher import validate_shape
    from trainer.profiler import ProfileSettings, run_profile
    from trainer.rescale import save_rescale_measurement
    from trainer.spec import ModelSpec

    if not math.isfinite(warmup) or warmup < 0:
        raise click.BadParameter("must be a duration >= 0", param_hint="'--warmup'")
    loaded = _load_job(job_path)
    job = loaded.job
    mode, batch = job.spec.training.mode, job.spec.training.global_batch_size
    spec = ModelSpec()
    for w in workers:
        for p in ps:
            validate_shape(spec, mode, batch, w, p)
    if rescale_out is None:
        measurement = job.spec.rescale.measurement
        rescale_out = (
            loaded.resolve(measurement)
            if measurement is not None
            else output.with_name(output.stem + ".rescale.json")
        )
    settings = ProfileSettings(
        workers=workers,
        ps=ps,
        seconds=seconds,
        warmup_s=warmup,
        rescales=rescales,
        partitions=partitions,
    )
    name = f"kale-profile-{job.metadata.name}"
    total = len(settings.configs)
    from tqdm import tqdm

    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            from autoscaler.sources.broker import BrokerStartError, EmbeddedBroker

            try:
                broker = stack.enter_context(EmbeddedBroker())
            except BrokerStartError as exc:
                raise UserError(f"cannot start the embedded broker: {exc}") from None
            bootstrap = broker.bootstrap
        bar = stack.enter_context(
            tqdm(total=total, desc="kale profile", unit="config", file=sys.stderr, disable=None)
        )

        def progress(kind: str, info: dict[str, Any]) -> None:
            if kind == "row":
                bar.update(1)
                bar.set_postfix_str(
                    f"w={info['workers']} p={info['ps']} {info['throughput']:,.0f}/s"
                )
            else:
                bar.set_postfix_str(f"resized in {info['total_s']:.1f}s")

        with _kafka_errors(bootstrap):
            result = run_profile(
                bootstrap=bootstrap,
                topic=name,
                group=name,
                mode=mode,
                global_batch=batch,
                settings=settings,
                spec=spec,
                on_progress=progress,
            )
    try:
        save_profile(result.profile(), output)
        if result.rescale is not None:
            save_rescale_measurement(result.rescale, rescale_out)
    except OSError as exc:
        raise UserError(f"cannot write the results: {exc}") from None
    rescale_doc = result.rescale.as_dict() if result.rescale is not None else None
    if as_json:
        emit_json(
            {
                "profile": str(output),
                "rescale_file": str(rescale_out) if result.rescale is not None else None,
                "mode": mode,
                "global_batch": batch,
                "rows": [r.as_dict() for r in result.rows],
                "rescale": rescale_doc,
                "notes": result.notes,
            }
        )
        return
    click.echo(
        table(
            [
                (
                    r.workers,
                    r.ps,
                    round(r.throughput, 1),
                    r.loss,
                    r.steps,
                    "stream-bound" if r.stream_bound else "",
                )
                for r in result.rows
            ],
            ["workers", "ps", "samples/s", "loss", "steps", "note"],
        )
    )
    click.echo(f"profile: {output}")
    if result.rescale is not None:
        m = result.rescale
        phases = ", ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in m.phases.items())
        click.echo(
            f"rescale: median {m.median_s:.2f}s, max {m.max_s:.2f}s over {len(m.samples)} "
            f"resizes ({phases}) -> {rescale_out}"
        )
    for note in result.notes:
        click.echo(f"kale: warning: {note}", err=True)
