"""Where the benchmarks find the repository and the shared data folder.

The real traces are not in the repository (third-party data, megabytes): they live in a
folder ``shared/data`` beside the checkout (``<repo>/../shared/data``), holding
``nasa_http_jul1995_1min.csv`` and ``placement/`` (the openb node and pod lists, the Lublin
log). Another ``data`` folder is named by ``--data DIR`` on the benchmarks that read it, or
by ``$KALE_DATA_DIR``; ``$KALE_PLACEMENT_DATA`` still names the ``placement`` folder alone.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (``examples/``: the job files and models the benchmarks run)."""

DATA_ENV = "KALE_DATA_DIR"
PLACEMENT_ENV = "KALE_PLACEMENT_DATA"
NASA_FILE = "nasa_http_jul1995_1min.csv"


def add_data_flag(parser: argparse.ArgumentParser) -> None:
    """``--data DIR``: the shared ``data`` folder, for this run."""
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"shared data folder (default: ${DATA_ENV}, else <repo>/../shared/data)",
    )


def data_dir(flag: Path | None = None) -> Path:
    """The shared ``data`` folder: ``flag``, else ``$KALE_DATA_DIR``, else beside the checkout."""
    if flag is not None:
        return flag
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else ROOT.parent / "shared" / "data"


def placement_dir(flag: Path | None = None) -> Path:
    """The placement traces: ``<flag>/placement``, else ``$KALE_PLACEMENT_DATA``, else
    :func:`data_dir`'s ``placement`` folder."""
    if flag is None and (env := os.environ.get(PLACEMENT_ENV)):
        return Path(env)
    return data_dir(flag) / "placement"


def nasa_trace(flag: Path | None = None) -> Path:
    """The NASA HTTP July 1995 trace (1 minute), real traffic beside the generated traces."""
    return data_dir(flag) / NASA_FILE
