"""Pictures of a forecast: recent history, the forecast median and its p10–p90 band.

``.png`` is drawn with matplotlib (Agg, no display needed); ``.html`` with plotly, with the
plotly.js bundle embedded in the file so it opens without a network connection.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from forecasting.base import Forecast

FORMATS = (".png", ".html")


def plot_forecast(
    history: pd.Series,
    forecast: Forecast,
    path: str | os.PathLike[str],
    *,
    actual: pd.Series | None = None,
    title: str = "",
) -> None:
    """Write the picture; the format follows the suffix (``.png`` or ``.html``)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{path}: unsupported format {suffix!r} (use .png or .html)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        _png(history, forecast, path, actual, title)
    else:
        _html(history, forecast, path, actual, title)


def _png(
    history: pd.Series,
    forecast: Forecast,
    path: str | os.PathLike[str],
    actual: pd.Series | None,
    title: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    ax.plot(history.index, history.to_numpy(), color="0.35", lw=0.8, label="history")
    if actual is not None and len(actual):
        ax.plot(actual.index, actual.to_numpy(), color="black", lw=0.8, label="actual")
    ax.fill_between(
        forecast.timestamps,
        forecast.p10,
        forecast.p90,
        color="tab:blue",
        alpha=0.25,
        label="p10–p90",
    )
    ax.plot(
        forecast.timestamps,
        forecast.p50,
        color="tab:blue",
        lw=1.4,
        label=f"forecast ({forecast.model})",
    )
    ax.set_ylabel("samples/s")
    ax.set_title(title or f"{forecast.model}: {forecast.horizon}-step forecast")
    ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _html(
    history: pd.Series,
    forecast: Forecast,
    path: str | os.PathLike[str],
    actual: pd.Series | None,
    title: str,
) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=history.index,
            y=history.to_numpy(),
            name="history",
            line={"color": "#555", "width": 1},
        )
    )
    if actual is not None and len(actual):
        fig.add_trace(
            go.Scatter(
                x=actual.index,
                y=actual.to_numpy(),
                name="actual",
                line={"color": "black", "width": 1},
            )
        )
    fig.add_trace(
        go.Scatter(
            x=forecast.timestamps, y=forecast.p90, name="p90", line={"width": 0}, showlegend=False
        )
    )
    fig.add_trace(
        go.Scatter(
            x=forecast.timestamps,
            y=forecast.p10,
            name="p10–p90",
            fill="tonexty",
            line={"width": 0},
            fillcolor="rgba(31,119,180,0.25)",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=forecast.timestamps,
            y=forecast.p50,
            name=f"forecast ({forecast.model})",
            line={"color": "#1f77b4", "width": 2},
        )
    )
    fig.update_layout(
        title=title or f"{forecast.model}: {forecast.horizon}-step forecast",
        yaxis_title="samples/s",
        template="plotly_white",
    )
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
