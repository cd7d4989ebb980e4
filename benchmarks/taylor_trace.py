"""Write a real half-hourly trace for benchmarks: Taylor's electricity demand, summer 2000.

J. W. Taylor (2003), "Short-term electricity demand forecasting using double seasonal
exponential smoothing": half-hourly electricity demand in England and Wales from Monday
5 June to Sunday 27 August 2000 (4032 values, megawatts). The pmdarima wheel on PyPI carries
it as a Python list; this script reads it from the wheel (nothing is installed or imported
from it) and writes ``taylor_30m.csv`` and, averaged, ``taylor_1h.csv``::

    .venv/bin/pip download pmdarima --no-deps -d pm
    .venv/bin/python -m benchmarks.taylor_trace pm/pmdarima-*.whl -o pm
    .venv/bin/python -m benchmarks.forecast --csv pm/taylor_30m.csv \\
        --csv pm/taylor_1h.csv --only-csv

The values are demand, not arrivals per second; a forecaster only sees a rate with a daily
and weekly shape, which is what it is used for here. Local time (BST, no clock change in
the window) is written as UTC.
"""

from __future__ import annotations

import argparse
import ast
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from autoscaler.sim.traces import save_trace

MEMBER = "pmdarima/datasets/taylor.py"


def taylor_values(wheel: Path) -> np.ndarray:
    """The 4032 half-hourly values of ``load_taylor``, parsed from the wheel's source."""
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read(MEMBER).decode("utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List) and len(node.elts) > 1000:
            values = np.array(ast.literal_eval(node), dtype=float)
            if len(values) != 4032:
                raise SystemExit(f"{wheel}: expected 4032 values in {MEMBER}, found {len(values)}")
            return values
    raise SystemExit(f"{wheel}: no data list found in {MEMBER}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path, help="a pmdarima wheel (pip download pmdarima)")
    ap.add_argument("-o", "--out", type=Path, default=Path("."), help="output folder")
    args = ap.parse_args(argv)
    if not args.wheel.is_file():
        ap.error(f"{args.wheel}: file not found")
    values = taylor_values(args.wheel)
    index = pd.date_range("2000-06-05", periods=len(values), freq="30min", tz="UTC")
    half_hourly = pd.Series(values, index=index, name="value")
    args.out.mkdir(parents=True, exist_ok=True)
    save_trace(half_hourly, args.out / "taylor_30m.csv")
    save_trace(half_hourly.resample("1h").mean(), args.out / "taylor_1h.csv")
    print(f"wrote {args.out / 'taylor_30m.csv'} and {args.out / 'taylor_1h.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
