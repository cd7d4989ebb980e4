"""``kale demo``: the main job on the embedded default, end to end, in a few minutes.

It generates a multi-day trace, fits nothing it does not need (the example job ships its
fitted throughput model), and replays the trace through the simulator against Kale and the
reactive baselines, printing the comparison and writing an HTML report. Everything lands in
``--out`` (default ``./kale-demo``).
"""

from __future__ import annotations

from pathlib import Path

import click

from autoscaler.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@click.command("demo")
@click.option("--out", type=click.Path(file_okay=False), default="kale-demo", show_default=True,
              help="Folder for the trace, the report and the JSON result.")
@click.option("--days", type=click.IntRange(min=8), default=10, show_default=True,
              help="Days of generated traffic (the first 7 are forecaster history).")
@click.option("--job", "job_path", type=click.Path(dir_okay=False), default=None,
              help="Job to drive (default: examples/ctr-sync.yaml).")
@click.option("--forecaster", default=None,
              help="Forecasting model (default: the job's spec.forecast.model).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the simulation JSON.")
def demo(out: str, days: int, job_path: str | None, forecaster: str | None, seed: int,
         as_json: bool) -> None:
    """Generate traffic and compare Kale with HPA, KEDA, Autopilot, MADU and static."""
    from autoscaler.cli.main import main as kale_main
    from autoscaler.tracegen import generate_trace
    from autoscaler.traces import save_trace

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    job = Path(job_path) if job_path else EXAMPLES / "ctr-sync.yaml"
    if not job.exists():
        raise UserError(f"{job}: file not found")
    trace = folder / "trace.csv"
    click.echo(f"[1/2] generating {days} days of 1-minute traffic → {trace}", err=True)
    save_trace(generate_trace(days=days, interval_s=60, peak_trough=20, seed=seed), trace)
    report = folder / "report.html"
    click.echo("[2/2] simulating kale, hpa, keda, autopilot, madu, static, oracle "
               "(fits the forecaster on the first run; cached after)", err=True)
    args = ["simulate", "--trace", str(trace), "--job", str(job), "--policies",
            "kale,hpa,keda,autopilot,madu,static,oracle", "--scale-peak", "0.8",
            "--warmup-days", "7", "--report", str(report)]
    if forecaster:
        args += ["--forecaster", forecaster]
    if as_json:
        args.append("--json")
    code = kale_main(args)
    if code != 0:
        raise SystemExit(code)
    click.echo(f"report: {report}", err=True)
