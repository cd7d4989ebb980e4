"""The picture of a timed run: queue length and utilisation over time, one line per entry.

People compare policies faster by eye here than from tables: a queue that never drains, a
utilisation dip while GPUs are under repair. Drawn with matplotlib's Agg backend (no display).
"""

from __future__ import annotations

import os

import numpy as np

BINS = 300
"""Points per line: a step function with thousands of events is averaged (time-weighted) into
this many bins, so the lines show trends instead of a solid band of spikes."""


def binned(t_s: np.ndarray, values: np.ndarray, bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean of the step function (value ``values[i]`` from ``t_s[i]`` until
    ``t_s[i+1]``) over ``bins`` equal bins; returns the bin starts and the means."""
    t_s, values = np.asarray(t_s, dtype=float), np.asarray(values, dtype=float)
    if len(t_s) < 2 or t_s[-1] <= t_s[0]:
        return t_s, values
    edges = np.linspace(t_s[0], t_s[-1], bins + 1)
    # Area under the step function up to each edge, by interpolating its running integral.
    area = np.concatenate([[0.0], np.cumsum(values[:-1] * np.diff(t_s))])
    at_edges = np.interp(edges, t_s, area)
    return edges[:-1], np.diff(at_edges) / np.diff(edges)


def plot_timelines(
    timelines: dict[str, dict[str, list[float]]], path: str | os.PathLike[str], *, title: str = ""
) -> None:
    """Write a PNG: queue length (top) and each resource's utilisation (bottom) vs hours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for name, line in timelines.items():
        if not line.get("t_s"):
            continue
        t = np.asarray(line["t_s"], dtype=float)
        hours = (t - t[0]) / 3600.0
        top.step(hours, line["queue"], where="post", lw=0.9, label=name)
        for key in (k for k in line if k not in ("t_s", "queue")):
            style = "-" if key in ("gpu", "processors") else ":"
            bottom.step(
                hours,
                np.asarray(line[key]) * 100,
                style,
                where="post",
                lw=0.9,
                label=f"{name} {key}",
            )
    top.set_ylabel("jobs waiting (mean per bin)")
    bottom.set_ylabel("in use (%)")
    bottom.set_xlabel("hours since the first submit")
    bottom.set_ylim(0, 105)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    if title:
        top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
