"""Figures people would rather look at than read (matplotlib, Agg backend, lazy import)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def plot_training(
    records: list[Mapping[str, float]],
    path: str | Path,
    *,
    title: str,
    metric: str | None = None,
    validation: tuple[str, Sequence[tuple[float, float]], int | None] | None = None,
) -> Path:
    """An agent's training curve: return per episode (and ``metric``, if given) and loss.

    ``validation``: (label, [(episode, score)], the episode whose weights were kept) — the
    score that chose the shipped weights, in a panel of its own (episode −1: the warm start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes = [r["episode"] for r in records]
    panels = 2 + bool(metric) + bool(validation)
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.6))
    series = [("return", "episode return"), ("loss", "mean TD loss")]
    if metric:
        series.append((metric, metric.replace("_", " ")))
    for ax, (key, label) in zip(axes[: len(series)], series, strict=True):
        ax.plot(episodes, [r.get(key, float("nan")) for r in records], linewidth=1.2)
        ax.set(xlabel="episode", ylabel=label)
        ax.grid(alpha=0.3)
    if validation:
        label, points, kept = validation
        ax = axes[-1]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=1.2)
        if kept is not None:
            ax.axvline(kept, color="grey", linestyle="--", linewidth=1)
            ax.set_title("kept: " + ("the warm start" if kept < 0 else f"episode {kept}"))
        ax.set(xlabel="episode", ylabel=label)
        ax.grid(alpha=0.3)
    if any(r.get("loss", 0) > 0 for r in records):
        axes[1].set_yscale("log")
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
