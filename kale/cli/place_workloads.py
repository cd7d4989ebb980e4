"""``kale place workloads``: generate seeded workload families for training and judging.

``generate --family F --seed S -o DIR`` writes one workload of a family in the formats the
simulators read: ``nodes.csv`` and ``pods.csv`` (the openb trace's format, for ``kale place
simulate/timed --nodes --pods``) or ``jobs.swf`` (for ``kale place timed --swf``), and
``workload.json`` — the family, the seed, the proportions aimed at and obtained. ``list``
names the families. The families themselves: ``placement.workloads.families``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from common.errors import UserError
from kale.cli.place import placement_error
from kale.terminal.output import emit_json, table

File = click.Path(dir_okay=False)

FAMILIES_HELP = """\b
Families (seeded; same family and seed, same files):
  default            the openb default mix, resampled
  sharing-heavy      80 % of GPU pods share a GPU (source 44 %)
  sharing-light      20 % of GPU pods share a GPU
  multi-gpu-heavy    40 % of the GPU request from multi-GPU pods (source 7 %)
  cpu-heavy          CPU-only pods ask 50 % of the CPU (source 22 %)
  model-constrained  30 % of GPU pods restricted to GPU models (source 0 %)
  small-cluster      a quarter of the nodes (and of the GPU pods)
  half-cluster       half of the nodes
  lublin             Lublin-model jobs at the model's own load, 256 processors
  train-mix          openb mix and cluster drawn from the training box by the seed
  train-lublin       Lublin load (0.6-1.4) and machine (64-512) drawn by the seed
\b
Or parts joined by '+': sharing-0.8, multi-gpu-0.3, constrained-0.25, cpu-0.5, nodes-0.5
(openb: needs --nodes and --pods, the source lists), lublin-load-0.8, procs-128 (Lublin).
"""


@click.group("workloads")
def workloads() -> None:
    """Seeded workload families (openb variants, Lublin queues) for training and judging."""


@workloads.command("generate", epilog=FAMILIES_HELP)
@click.option("--family", required=True, help="Family name or parts (see below).")
@click.option("--seed", type=int, required=True, help="Which workload of the family.")
@click.option("--nodes", "nodes_path", type=File, help="Source node list CSV (openb families).")
@click.option("--pods", "pods_path", type=File, help="Source pod list CSV (openb families).")
@click.option(
    "--jobs",
    type=click.IntRange(min=2),
    default=1024,
    show_default=True,
    help="Jobs per Lublin sequence.",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write the workload into (created).",
)
@click.option("--json", "as_json", is_flag=True, help="Print workload.json on stdout too.")
def generate(
    family: str,
    seed: int,
    nodes_path: str | None,
    pods_path: str | None,
    jobs: int,
    out_dir: str,
    as_json: bool,
) -> None:
    """Write one workload of FAMILY (nodes.csv + pods.csv, or jobs.swf) and workload.json."""
    from placement.errors import PlacementInputError
    from placement.workloads.batch import write_swf
    from placement.workloads.families import (
        OpenbFamily,
        generate_lublin_family,
        generate_openb,
        parse_family,
    )
    from placement.workloads.openb import load_nodes, load_pods, write_nodes, write_pods

    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{out_dir}: not a folder")
    try:
        fam = parse_family(family)
        manifest: dict[str, Any] = {"family": family, "seed": seed}
        if isinstance(fam, OpenbFamily):
            if not (nodes_path and pods_path):
                raise PlacementInputError(
                    f"{family!r} varies the openb workload: give the source --nodes and --pods"
                )
            made = generate_openb(fam, load_nodes(nodes_path), load_pods(pods_path), seed=seed)
            folder.mkdir(parents=True, exist_ok=True)
            write_nodes(folder / "nodes.csv", made.nodes)
            write_pods(folder / "pods.csv", made.pods)
            manifest.update(
                kind="openb",
                files={"nodes": "nodes.csv", "pods": "pods.csv"},
                source={"nodes": nodes_path, "pods": pods_path},
                nodes=len(made.nodes),
                gpus=sum(n.gpus for n in made.nodes),
                pods=len(made.pods),
                targets=_rounded(made.targets),
                realised=_rounded(made.realised),
            )
        else:
            if nodes_path or pods_path:
                raise PlacementInputError(f"{family!r} is a Lublin family: drop --nodes/--pods")
            lub = generate_lublin_family(fam, seed=seed, jobs=jobs)
            folder.mkdir(parents=True, exist_ok=True)
            note = f"Kale workload family {family}, seed {seed} (Lublin-Feitelson model)"
            write_swf(folder / "jobs.swf", lub.jobs, processors=lub.processors, comments=[note])
            manifest.update(
                kind="lublin",
                files={"swf": "jobs.swf"},
                processors=lub.processors,
                jobs=len(lub.jobs),
                target_load=None if lub.target_load is None else round(lub.target_load, 4),
                realised_load=round(lub.realised_load, 4),
            )
    except PlacementInputError as exc:
        raise placement_error(exc) from None
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot write: {exc.strerror}") from None
    (folder / "workload.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if as_json:
        emit_json(manifest)
    else:
        files = ", ".join(str(folder / f) for f in manifest["files"].values())
        click.echo(f"{family} seed {seed}: {files}")


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in values.items()}


@workloads.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_families(as_json: bool) -> None:
    """The named families and what each sets (the rest as in the source)."""
    from placement.workloads.families import (
        NAMED,
        TRAINING_BOX,
        TRAINING_LOADS,
        TRAINING_PROCESSORS,
    )

    rows = {name: parts or "(the source mix)" for name, parts in NAMED.items()}
    rows["lublin"] = "lublin-load- (the model's own load)"
    rows["train-mix"] = "each proportion drawn in " + ", ".join(
        f"{axis} {lo:g}-{hi:g}" for axis, (lo, hi) in TRAINING_BOX.items()
    )
    rows["train-lublin"] = (
        f"load drawn in {TRAINING_LOADS[0]:g}-{TRAINING_LOADS[1]:g}, processors in "
        + ", ".join(str(p) for p in TRAINING_PROCESSORS)
    )
    if as_json:
        emit_json({"families": rows})
        return
    click.echo(table([[k, v] for k, v in rows.items()], ["family", "sets"]))
