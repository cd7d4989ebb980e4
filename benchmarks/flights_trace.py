"""Write real arrival-count traces for benchmarks: US flight departures, January-June 2001.

The ``vega-datasets`` npm package carries ``data/flights-3m.parquet``: three million US
domestic flights from 1 January to 30 June 2001, one row per flight with its departure time
(each airport's local clock, as the dataset gives it). Departures per minute are arrivals
of a real service with a strong daily and weekly shape, nights near zero and Poisson-like
noise at fine intervals, unlike the generator and unlike the NASA and electricity traces.
This script counts them and writes rates per minute at several intervals, windows ending
on 30 June 2001::

    npm pack vega-datasets && tar xzf vega-datasets-*.tgz package/data/flights-3m.parquet
    .venv/bin/pip install pyarrow          # only this script reads parquet
    .venv/bin/python -m benchmarks.flights_trace package/data/flights-3m.parquet -o flights
    .venv/bin/python -m benchmarks.forecast --csv flights/flights_1m_28d.csv --only-csv

Files: ``flights_1m_28d``, ``flights_5m_28d``, ``flights_30m_42d``, ``flights_1h_28d``,
``flights_1h_181d`` (``.csv``; departures per minute, averaged over the interval; local
time written as UTC).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from autoscaler.sim.traces import save_trace

WINDOWS: tuple[tuple[str, str, int], ...] = (
    # file stem, interval, days (ending on the last whole day)
    ("flights_1m_28d", "1min", 28),
    ("flights_5m_28d", "5min", 28),
    ("flights_30m_42d", "30min", 42),
    ("flights_1h_28d", "1h", 28),
    ("flights_1h_181d", "1h", 181),
)


def departures_per_minute(path: Path) -> pd.Series:
    """Departures in each minute from the first to the last whole day (zeros included)."""
    try:
        frame = pd.read_parquet(path, columns=["date"])
    except ImportError:
        raise SystemExit(
            f"{path}: reading parquet needs pyarrow (.venv/bin/pip install pyarrow)"
        ) from None
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"{path}: not the flights parquet file ({exc})") from None
    times = pd.to_datetime(frame["date"])
    first = times.min().floor("D")
    end = times.max().floor("D")  # the last day holds one midnight flight: left out
    counts = times[times < end].dt.floor("min").value_counts()
    index = pd.date_range(first, end, freq="min", inclusive="left")
    series = counts.reindex(index, fill_value=0).astype(float)
    series.index = series.index.tz_localize("UTC")
    return series.rename("value")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parquet", type=Path, help="vega-datasets' data/flights-3m.parquet")
    ap.add_argument("-o", "--out", type=Path, default=Path("."), help="output folder")
    args = ap.parse_args(argv)
    if not args.parquet.is_file():
        ap.error(f"{args.parquet}: file not found")
    per_minute = departures_per_minute(args.parquet)
    args.out.mkdir(parents=True, exist_ok=True)
    for stem, interval, days in WINDOWS:
        rate = per_minute.resample(interval).mean()
        start = rate.index[-1].floor("D") + pd.Timedelta(days=1) - pd.Timedelta(days=days)
        window = rate[rate.index >= start]
        path = args.out / f"{stem}.csv"
        save_trace(window, path)
        print(
            f"{path}: {len(window)} steps of {interval}, {window.index[0]} .. "
            f"{window.index[-1]}, mean {window.mean():.2f} departures/min"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
