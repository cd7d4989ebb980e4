"""Figures people would rather look at than read (matplotlib, Agg backend, lazy import)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plot_allocation(summary: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path:
    """Allocated vs arrived GPU share per policy (the inflation curves), saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (whole, tail) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(1.4, 1))
    for name, result in summary.items():
        curve = result["curve"]
        xs = [int(c) for c in curve]
        ys = [curve[c] for c in curve]
        label = f"{name} ({result['final']:.2f}%)"
        whole.plot(xs, ys, label=label, linewidth=1.4)
        tail.plot(xs, ys, label=label, linewidth=1.4)
    whole.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="ideal")
    whole.set(xlabel="arrived GPU demand (% of capacity)", ylabel="GPUs allocated (%)")
    whole.set_title("Inflation: allocation as demand arrives")
    tail.set(xlim=(90, 131), xlabel="arrived GPU demand (%)", title="Zoom: 90–130 %")
    lows = [min(v for c, v in r["curve"].items() if int(c) >= 90) for r in summary.values()]
    if lows:
        tail.set_ylim(min(lows) - 1, 100)
    for ax in (whole, tail):
        ax.grid(alpha=0.3)
    whole.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
