"""Arrival-rate traces: the one series every part of Kale consumes.

A trace is a CSV with header ``timestamp,value``: ISO-8601 timestamps on a regular grid and
the arrival rate in samples per second. Loading is strict about what cannot be repaired
(unparsable rows, timestamps that go backwards or repeat, negative or infinite rates) and
lenient about what can: missing steps — absent rows, and rows whose value is empty or
``nan``, which is how pandas and numpy write a gap — are filled by linear interpolation, with
a warning that says how many; a gap at either end cannot be interpolated and is cut off,
also with a warning. Errors name the file, the line and the reason, because the person
reading them is looking at that file.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from common.atomic import atomic_write_text
from common.errors import UserError

HEADER = ("timestamp", "value")


class TraceGapWarning(UserWarning):
    """Missing steps were filled by interpolation."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: a float Series of samples/s on a regular UTC grid."""

    series: pd.Series
    interval_s: float
    path: str | None = None
    filled_steps: int = 0

    @property
    def rows(self) -> int:
        return len(self.series)


def _parse_timestamp(text: str) -> datetime:
    ts = datetime.fromisoformat(text.strip())
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC)


def _read_rows(
    path: str | os.PathLike[str], *, strict_order: bool
) -> tuple[list[datetime], list[float], list[int]]:
    """The rows of a trace CSV as (timestamps, values, line numbers).

    Every row is checked (parsable timestamp, a finite non-negative number or a gap); with
    ``strict_order`` timestamps must also increase, which is what a trace is, and what
    :func:`resample_points` does not need.
    """
    name = str(path)
    p = Path(path)
    if not p.exists():
        raise UserError(f"{name}: file not found")
    if p.is_dir():
        raise UserError(f"{name}: is a directory, expected a CSV file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{name}: cannot read: {exc}") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise UserError(f"{name}: empty file, expected a header 'timestamp,value' and rows")
    reader = csv.reader(lines)
    header = [h.strip().lower() for h in next(reader)]
    if header[:2] != list(HEADER) or len(header) != 2:
        raise UserError(f"{name}:1: header must be 'timestamp,value', got {','.join(header)!r}")
    times: list[datetime] = []
    values: list[float] = []
    linenos: list[int] = []
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise UserError(
                f"{name}:{lineno}: expected 2 columns (timestamp,value), got {len(row)}"
            )
        try:
            ts = _parse_timestamp(row[0])
        except ValueError:
            raise UserError(f"{name}:{lineno}: timestamp {row[0]!r} is not ISO-8601") from None
        try:
            # An empty cell is a gap, like NaN: both are filled with the missing rows.
            value = float(row[1]) if row[1].strip() else math.nan
        except ValueError:
            raise UserError(f"{name}:{lineno}: value {row[1]!r} is not a number") from None
        if math.isinf(value):
            raise UserError(f"{name}:{lineno}: value is {row[1].strip()}, expected a finite rate")
        if value < 0:
            raise UserError(f"{name}:{lineno}: value {value:g} is negative (samples/s must be ≥ 0)")
        if strict_order and times:
            if ts == times[-1]:
                raise UserError(f"{name}:{lineno}: duplicate timestamp {row[0].strip()}")
            if ts < times[-1]:
                raise UserError(
                    f"{name}:{lineno}: timestamp {row[0].strip()} goes back in time "
                    f"(previous row is {times[-1].isoformat()})"
                )
        times.append(ts)
        values.append(value)
        linenos.append(lineno)
    return times, values, linenos


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and check a trace CSV; raise :class:`UserError` naming file, line and reason."""
    name = str(path)
    times, values, linenos = _read_rows(path, strict_order=True)
    if len(times) < 2:
        raise UserError(f"{name}: needs at least 2 rows, found {len(times)}")
    known = [i for i, v in enumerate(values) if not math.isnan(v)]
    if len(known) < 2:
        raise UserError(f"{name}: needs at least 2 rows with a value, found {len(known)}")
    first, last = known[0], known[-1]
    if first or last < len(values) - 1:
        warnings.warn(
            f"{name}: {first + len(values) - 1 - last} row(s) with no value at the start or end "
            "cut off (a gap at an end cannot be interpolated)",
            TraceGapWarning,
            stacklevel=2,
        )
    keep = slice(first, last + 1)
    return _regularise(name, times[keep], values[keep], linenos[keep])


def _regularise(name: str, times: list[datetime], values: list[float], linenos: list[int]) -> Trace:
    index = pd.DatetimeIndex(times)
    # Seconds from the index itself: pandas 3 picks the resolution (us, ns) per index.
    steps = np.diff(np.asarray((index - index[0]).total_seconds(), dtype=float))
    interval = float(np.min(steps))
    if interval <= 0:
        raise UserError(f"{name}: timestamps must increase")
    ratios = steps / interval
    bad = np.flatnonzero(np.abs(ratios - np.round(ratios)) > 1e-6)
    if bad.size:
        i = int(bad[0])
        raise UserError(
            f"{name}:{linenos[i + 1]}: irregular interval: {steps[i]:g} s after the previous "
            f"row is not a multiple of the trace's interval {interval:g} s (put it on a "
            f"regular grid with 'kale trace resample --interval SECONDS')"
        )
    series = pd.Series(values, index=index, dtype=float, name="value")
    absent = int(np.round(ratios).sum() - len(steps))
    blank = int(series.isna().sum())
    missing = absent + blank
    if missing:
        grid = pd.date_range(index[0], index[-1], freq=pd.Timedelta(seconds=interval))
        series = series.reindex(grid).interpolate(method="linear")
        why = f" ({blank} with an empty or nan value)" if blank else ""
        warnings.warn(
            f"{name}: {missing} missing step(s){why} filled by linear interpolation",
            TraceGapWarning,
            stacklevel=3,
        )
    series.index.freq = pd.Timedelta(seconds=interval)
    return Trace(series=series, interval_s=interval, path=name, filled_steps=missing)


def resample_points(
    path: str | os.PathLike[str], interval_s: float, *, how: str = "mean"
) -> tuple[pd.Series, dict[str, int]]:
    """Put a trace CSV whose timestamps are irregular (scrape jitter, rows out of order,
    repeated timestamps, a changed interval) on a regular grid of ``interval_s`` seconds.

    Each step ``[t, t + interval)`` takes the ``mean`` of the rates whose timestamps fall in
    it (rates in samples/s average), or their ``sum`` (per-step counts add); steps with no
    row stay empty, which :func:`load_trace` fills by interpolation and reports. The grid
    starts at the first timestamp rounded down to a multiple of the interval since the
    epoch, so resampled files of the same source line up. Returns the series (NaN for empty
    steps) and counts: ``rows``, ``steps``, ``empty_steps``.
    """
    if how not in ("mean", "sum"):
        raise ValueError(f"how must be 'mean' or 'sum', got {how!r}")
    if not interval_s > 0:
        raise UserError(f"interval must be positive, got {interval_s:g}")
    times, values, _ = _read_rows(path, strict_order=False)
    points = pd.Series(values, index=pd.DatetimeIndex(times), dtype=float).dropna()
    if points.empty:
        raise UserError(f"{path}: no rows with a value")
    step = pd.Timedelta(seconds=interval_s)
    epoch = pd.Timestamp(0, tz="UTC")
    slots = np.floor((points.index - epoch) / step).astype(np.int64)
    grouped = points.groupby(np.asarray(slots))
    agg = grouped.mean() if how == "mean" else grouped.sum()
    first, last = int(agg.index.min()), int(agg.index.max())
    full = agg.reindex(np.arange(first, last + 1))
    if len(full) < 2:
        raise UserError(
            f"{path}: every row falls in one {interval_s:g}-second step; "
            "choose a shorter --interval"
        )
    index = pd.date_range(epoch + first * step, periods=len(full), freq=step)
    out = pd.Series(full.to_numpy(dtype=float), index=index, name="value")
    return out, {"rows": len(times), "steps": len(out), "empty_steps": int(out.isna().sum())}


def save_trace(series: pd.Series, path: str | os.PathLike[str]) -> None:
    """Write a trace CSV atomically (temp file in the same folder, then rename)."""
    idx = series.index
    if idx.tz is None:
        idx = idx.tz_localize("UTC")
    stamps = idx.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = ["timestamp,value\n"]
    lines += [f"{ts},{v:.6g}\n" for ts, v in zip(stamps, series.to_numpy(dtype=float), strict=True)]
    atomic_write_text(path, "".join(lines), fsync=False, newline="")


def series_from_values(
    values: np.ndarray, interval_s: float, start: str = "2026-01-05"
) -> pd.Series:
    """A trace Series from raw values (handy for tests and simulations)."""
    index = pd.date_range(
        pd.Timestamp(start, tz="UTC"), periods=len(values), freq=pd.Timedelta(seconds=interval_s)
    )
    return pd.Series(np.asarray(values, dtype=float), index=index, name="value")


def daily_profile(series: pd.Series) -> pd.Series:
    """Mean rate by time of day (one value per step of the day)."""
    idx = series.index
    slot = idx.hour * 3600 + idx.minute * 60 + idx.second
    return series.groupby(np.asarray(slot)).mean()


def trace_info(trace: Trace) -> dict[str, object]:
    """Summary numbers of a trace (the fields of ``kale trace info --json``).

    ``peak_trough_ratio`` is the max/min of the mean daily profile (null when the trace is
    shorter than a day or the profile touches zero); ``seasonality_strength`` is the STL
    strength of the daily season (null with fewer than two days).
    """
    from forecasting.seasonality import candidate_periods, detect_seasonality

    s = trace.series
    values = s.to_numpy(dtype=float)
    daily_steps = candidate_periods(trace.interval_s).get("daily")
    ratio: float | None = None
    if s.index[-1] - s.index[0] >= pd.Timedelta(days=1) and daily_steps:
        prof = daily_profile(s)
        if float(prof.min()) > 0:
            ratio = float(prof.max() / prof.min())
    report = detect_seasonality(values, trace.interval_s)
    return {
        "rows": len(s),
        "start": s.index[0].isoformat().replace("+00:00", "Z"),
        "end": s.index[-1].isoformat().replace("+00:00", "Z"),
        "interval_s": trace.interval_s,
        "days": float(len(s) * trace.interval_s / 86400.0),
        "min": float(values.min()),
        "max": float(values.max()),
        "mean": float(values.mean()),
        "peak_trough_ratio": ratio,
        "daily_period_steps": daily_steps,
        "seasonality_strength": report.strength.get("daily"),
        "weekly_seasonality_strength": report.strength.get("weekly"),
        "detected_periods": report.detected,
        "filled_steps": trace.filled_steps,
    }
