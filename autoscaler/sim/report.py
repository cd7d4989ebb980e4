"""One self-contained HTML page comparing policies: plots and the metrics table.

The plotly bundle is embedded from the installed ``plotly`` package (no CDN: reports are
read on machines without internet). Long runs are bucketed to at most ``MAX_POINTS`` points
per line: mean load, capacity and workers per bucket, and the *maximum* delay, so no
violation disappears from the picture.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.sim.engine import SimResult
from common.numbers import format_number, format_percent

MAX_POINTS = 3000
# (metric, column heading, shown as a percentage): every cell goes through the one number
# formatter (common/numbers.py), so the report reads like the terminal and the dashboard.
METRIC_COLUMNS = (
    ("slo_violation_rate", "SLO violations", True),
    ("cumulative_delay_min", "cum. delay (min)", False),
    ("downtime_min", "downtime (min)", False),
    ("rescale_count", "rescales", False),
    ("rescales_per_day", "rescales / day", False),
    ("gpu_hours", "GPU-hours", False),
    ("lower_bound_ratio", "× lower bound", False),
    ("regret", "regret (× optimal)", False),
    ("mean_workers", "mean workers", False),
    ("max_delay_min", "max delay (min)", False),
    ("p99_delay_min", "p99 delay (min)", False),
)


def _bucket(values: np.ndarray, size: int, how: str) -> np.ndarray:
    if size <= 1:
        return values
    n = math.ceil(len(values) / size)
    pad = n * size - len(values)
    v = np.concatenate([values, np.full(pad, np.nan)]).reshape(n, size)
    out: np.ndarray = np.nanmax(v, axis=1) if how == "max" else np.nanmean(v, axis=1)
    return out


def _cell(value: Any, percent: bool) -> str:
    return html.escape(format_percent(value) if percent else format_number(value))


def metrics_table_html(
    metrics: Mapping[str, Mapping[str, Any]], lower_bound_gpu_hours: float
) -> str:
    """The metrics as an HTML table, one row per policy plus the lower bound."""
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in METRIC_COLUMNS)
    rows = []
    for name, m in metrics.items():
        cells = "".join(f"<td>{_cell(m.get(key), pct)}</td>" for key, _, pct in METRIC_COLUMNS)
        rows.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
    lb = [""] * len(METRIC_COLUMNS)
    lb[[k for k, _, _ in METRIC_COLUMNS].index("gpu_hours")] = _cell(lower_bound_gpu_hours, False)
    rows.append("<tr><th>lower bound</th>" + "".join(f"<td>{c}</td>" for c in lb) + "</tr>")
    return (
        '<table class="metrics"><thead><tr><th>policy</th>'
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def build_figure(
    results: Mapping[str, SimResult],
    *,
    lower_bound_workers: np.ndarray | None = None,
    times: Sequence[Any] | None = None,
) -> Any:
    """Load vs capacity per policy, workers of every policy, delay vs the SLO."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    names = list(results)
    first = results[names[0]]
    n = first.steps
    size = max(1, math.ceil(n / MAX_POINTS))
    if times is None:
        x = _bucket(np.arange(n) * first.interval_s / 3600.0, size, "min")
        x_title = "hours"
    else:
        x = np.asarray(times)[::size]
        x_title = "time (UTC)"
    best = results.get("optimal")
    titles = [f"{name}: load vs capacity (samples/s)" for name in names]
    titles += ["workers", "delay (min) vs SLO"]
    rows = len(names) + 2
    fig = make_subplots(
        rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.04
    )
    load = _bucket(first.arrivals, size, "mean")
    for i, name in enumerate(names, start=1):
        res = results[name]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=load,
                name="load",
                line={"color": "#444", "width": 1},
                legendgroup="load",
                showlegend=i == 1,
            ),
            row=i,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_bucket(res.capacity, size, "mean"),
                name=f"{name} capacity",
                line={"width": 1},
                legendgroup=name,
            ),
            row=i,
            col=1,
        )
        if best is not None and name != "optimal":  # what the optimum gave at that time
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=_bucket(best.capacity, size, "mean"),
                    name="optimal capacity",
                    line={"width": 1, "dash": "dot", "color": "#000"},
                    legendgroup="optimal",
                    showlegend=False,
                ),
                row=i,
                col=1,
            )
    for name in names:
        res = results[name]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_bucket(res.workers, size, "mean"),
                name=f"{name} workers",
                line=(
                    {"width": 2, "shape": "hv", "dash": "dash", "color": "#000"}
                    if name == "optimal"
                    else {"width": 1, "shape": "hv"}
                ),
                legendgroup=name,
            ),
            row=rows - 1,
            col=1,
        )
    if lower_bound_workers is not None:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_bucket(np.asarray(lower_bound_workers, float), size, "mean"),
                name="lower bound workers",
                line={"width": 1, "dash": "dot", "color": "#888"},
            ),
            row=rows - 1,
            col=1,
        )
    for name in names:
        res = results[name]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_bucket(res.delay / 60.0, size, "max"),
                name=f"{name} delay",
                line={"width": 1},
                legendgroup=name,
            ),
            row=rows,
            col=1,
        )
    fig.add_hline(
        y=first.slo_s / 60.0,
        line_dash="dash",
        line_color="red",
        row=rows,
        col=1,
        annotation_text="SLO",
    )
    fig.update_xaxes(title_text=x_title, row=rows, col=1)
    fig.update_layout(height=260 * rows, template="plotly_white", margin={"t": 40})
    return fig


@dataclass
class ReportSection:
    """One job's part of the page: its table and its plots."""

    heading: str
    results: Mapping[str, SimResult]
    metrics: Mapping[str, Mapping[str, Any]]
    lower_bound_gpu_hours: float
    lower_bound_workers: np.ndarray | None = None
    times: Sequence[Any] | None = None
    notes: Sequence[str] = ()


def write_report(
    path: str | os.PathLike[str],
    sections: Sequence[ReportSection],
    *,
    title: str = "kale simulate",
    notes: Sequence[str] = (),
) -> None:
    """Write the page (the plotly bundle embedded once); ``OSError`` if it cannot be written."""
    parts = []
    for i, sec in enumerate(sections):
        fig = build_figure(
            sec.results, lower_bound_workers=sec.lower_bound_workers, times=sec.times
        )
        plot = fig.to_html(full_html=False, include_plotlyjs=i == 0)
        items = "".join(f"<li>{html.escape(n)}</li>" for n in sec.notes)
        parts.append(
            f"<section><h2>{html.escape(sec.heading)}</h2><ul>{items}</ul>"
            f"{metrics_table_html(sec.metrics, sec.lower_bound_gpu_hours)}{plot}</section>"
        )
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    body = "\n".join(parts)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table.metrics {{ border-collapse: collapse; margin: 1em 0; }}
table.metrics th, table.metrics td {{ border: 1px solid #ccc; padding: .3em .6em;
  text-align: right; }}
table.metrics thead th {{ background: #f3f3f3; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<ul>{items}</ul>
{body}
</body></html>
"""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
