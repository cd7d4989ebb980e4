"""The picture of a fit: measured points against the fitted curve, the peak marked.

It sits next to the model it draws, as :mod:`forecasting.plot` does for forecasts; the CLI
only names the file. matplotlib is imported when a picture is drawn, never when the package
is imported (the controller loads models, it never draws them). The image is written to a
temporary file and renamed, so a reader never sees half a picture.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from throughput.model import ThroughputModel
from throughput.profile import Profile


def plot_fit(model: ThroughputModel, profile: Profile, path: str | os.PathLike[str]) -> None:
    """Draw ``profile``'s points of the model's mode and the curve at p = ceil(w/ratio).

    The curve runs a quarter past the larger of the profiled range and the peak (capped at
    the model's ``max_workers``). Raises ``OSError`` when the file cannot be written and
    ``ValueError`` for a format matplotlib does not know.
    """
    rows = profile.for_mode(model.mode)
    top = min(model.max_workers, max(int(rows.workers.max()), model.peak_workers) * 5 // 4)
    w = np.arange(model.min_workers, max(top, model.min_workers) + 1)
    curve = model.throughput(w, warn=False)
    fig = _figure(model, rows, rows.on_ratio(model.ratio), w, curve)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=target.suffix or ".png", dir=target.parent or "."
    )
    os.close(fd)
    try:
        fig.savefig(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def _figure(
    model: ThroughputModel, rows: Profile, on: np.ndarray, w: np.ndarray, curve: np.ndarray
) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pw, pf = rows.workers, rows.throughput
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.scatter(pw[on], pf[on], s=18, color="tab:blue", label=f"measured, ps = ⌈w/{model.ratio}⌉")
    if (~on).any():
        ax.scatter(
            pw[~on],
            pf[~on],
            s=18,
            facecolors="none",
            edgecolors="tab:gray",
            label="measured, other ps",
        )
    ax.plot(w, curve, color="tab:orange", lw=2, label=f"{model.mode}/{model.family} fit")
    pk_w, pk_f = model.peak_workers, model.peak_throughput
    if w[0] <= pk_w <= w[-1]:
        ax.axvline(pk_w, color="tab:red", ls=":", lw=1)
        ax.plot(
            [pk_w],
            [pk_f],
            marker="*",
            ms=14,
            color="tab:red",
            ls="none",
            label=f"peak: {pk_w} workers, {pk_f:,.0f}/s",
        )
    ax.set_xlabel("workers")
    ax.set_ylabel("throughput (samples/s)")
    cv = model.metrics.get("cv_mape")
    ax.set_title(
        f"{model.family_spec.formula()}" + (f"   CV MAPE {cv:.2f} %" if cv else ""), fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
