"""``kale demo`` (what ``make demo`` runs): the live system on a generated multi-day trace.

Starts the embedded Kafka broker, replays several days of generated traffic compressed in
time, runs the controller with the Local actuator over real worker processes, serves the
dashboard (its URL is printed), and ends — on time or on Ctrl-C — with a table of the live
Kale run against HPA (and Kale) simulated on the same replay. Nothing is left running.

``--sim-only`` keeps the earlier, offline demo: the trace through ``kale simulate`` only.
"""

from __future__ import annotations

from pathlib import Path

import click

from common.errors import UserError
from kale.demo import examples
from kale.terminal.errors import user_errors
from kale.terminal.flags import json_option
from kale.terminal.output import emit_json


@click.command("demo")
@click.option(
    "--minutes",
    type=click.FloatRange(min=0.1, max=120),
    default=4.5,
    show_default=True,
    help="Wall minutes of live replay.",
)
@click.option(
    "--speedup",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="Trace seconds per wall second (600: a day in 144 s).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Dashboard port (a free one if taken; 0: always a free one).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Dashboard address.")
@click.option("--no-browser", is_flag=True, help="Do not open the dashboard in a browser.")
@click.option(
    "--forecaster",
    default="seasonal_naive",
    show_default=True,
    type=click.Choice(["seasonal_naive", "ets", "stl_ets", "dlinear", "kale"]),
    help="Forecasting model (kale: the transformer; needs minutes to train).",
)
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the controller state here (then `kale dashboard "
    "--state DIR` shows the run again); default: a temporary folder.",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Trace generator seed.")
@json_option("Print the comparison as JSON.")
@click.option(
    "--sim-only",
    is_flag=True,
    help="Only simulate (the offline demo): generate "
    "a trace and compare every policy with `kale simulate`.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="kale-demo",
    show_default=True,
    help="--sim-only: folder for the trace, report and JSON.",
)
@click.option(
    "--days",
    type=click.IntRange(min=8),
    default=10,
    show_default=True,
    help="--sim-only: days of generated traffic (the first 7 are history).",
)
@click.option(
    "--job",
    "job_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="--sim-only: job to drive (default: examples/ctr-sync.yaml).",
)
def demo(
    minutes: float,
    speedup: float,
    port: int,
    host: str,
    no_browser: bool,
    forecaster: str,
    state_dir: Path | None,
    seed: int,
    as_json: bool,
    sim_only: bool,
    out: str,
    days: int,
    job_path: str | None,
) -> None:
    """Run Kale live on generated traffic and compare it with HPA on the same replay."""
    if sim_only:
        _sim_only(out, days, job_path, forecaster, seed, as_json)
        return
    from kale.demo.live import DemoOptions, run
    from kale.demo.plan import DemoPlan
    from kale.demo.summary import closing_lines

    with user_errors(ValueError):
        plan = DemoPlan(minutes=minutes, speedup=speedup, forecaster=forecaster, seed=seed)
    examples.from_checkout(examples.MODEL)  # the plan's model; checked before anything starts
    opts = DemoOptions(
        plan=plan, host=host, port=port, open_browser=not no_browser, state_dir=state_dir
    )
    res = run(opts)
    if as_json:
        emit_json(res.result)
        return
    lines = closing_lines(
        res.result,
        plan,
        wall_s=res.wall_s,
        interrupted=res.interrupted,
        state_dir=res.state_dir,
    )
    click.echo("\n".join(lines))


def _sim_only(
    out: str, days: int, job_path: str | None, forecaster: str, seed: int, as_json: bool
) -> None:
    """The offline demo: a generated trace through ``kale simulate`` (every policy)."""
    from autoscaler.sim.tracegen import generate_trace
    from autoscaler.sim.traces import save_trace
    from kale.cli.main import main as kale_main

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    job = Path(job_path) if job_path else examples.from_checkout(examples.JOB)
    if not job.exists():
        raise UserError(f"{job}: file not found")
    trace = folder / "trace.csv"
    click.echo(f"[1/2] generating {days} days of 1-minute traffic → {trace}", err=True)
    save_trace(generate_trace(days=days, interval_s=60, peak_trough=20, seed=seed), trace)
    report = folder / "report.html"
    click.echo("[2/2] simulating kale, hpa, keda, autopilot, madu, static, oracle", err=True)
    args = [
        "simulate",
        "--trace",
        str(trace),
        "--job",
        str(job),
        "--policies",
        "kale,hpa,keda,autopilot,madu,static,oracle",
        "--scale-peak",
        "0.8",
        "--warmup-days",
        "7",
        "--report",
        str(report),
        "--forecaster",
        forecaster,
    ]
    if as_json:
        args.append("--json")
    code = kale_main(args)
    if code != 0:
        raise SystemExit(code)
    click.echo(f"report: {report}", err=True)
