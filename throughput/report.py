"""What a fit or a family comparison reports: the JSON documents ``kale throughput`` prints.

They live here rather than in the CLI because they are facts about the model (its peak,
its scores, which family won and why), and a library caller wants the same document the
command prints. The field names are a contract of ``kale throughput fit|compare --json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from throughput.fit import FamilyFit, select_best
from throughput.model import ThroughputModel


def fit_report(model: ThroughputModel, *, saved_to: str | None = None) -> dict[str, Any]:
    """``kale throughput fit --json``: the family, θ, scores, peak and the range it holds for."""
    return {
        "family": model.family,
        "theta": list(model.theta),
        "mape": model.metrics.get("mape"),
        "cv_mape": model.metrics.get("cv_mape"),
        "r2": model.metrics.get("r2"),
        "peak_workers": model.peak_workers,
        "peak_throughput": model.peak_throughput,
        "peak_ps": model.ps_for(model.peak_workers),
        "peak_at_range_edge": model.peak_at_range_edge,
        "mode": model.mode,
        "formula": model.family_spec.formula(),
        "ratio": model.ratio,
        "global_batch": model.global_batch,
        "min_workers": model.min_workers,
        "max_workers": model.max_workers,
        "candidates": {name: row.get("cv_mape") for name, row in model.candidates.items()},
        "model": saved_to,
    }


@dataclass(frozen=True)
class Comparison:
    """Every family's scores on one profile and the one :func:`select_best` keeps."""

    mode: str
    ratio: int
    fits: list[FamilyFit]
    best: str
    """The family a fit with ``family="auto"`` would keep."""
    lowest: str | None
    """The selectable family with the lowest CV MAPE (differs from ``best`` on a tie)."""

    def as_dict(self) -> dict[str, Any]:
        """``kale throughput compare --json``."""
        return {
            "mode": self.mode,
            "ratio": self.ratio,
            "best": self.best,
            "families": {f.family.name: f.row() for f in self.fits},
        }

    @property
    def tie_note(self) -> str:
        """Why ``best`` is not the lowest CV MAPE, or an empty string when it is."""
        if self.lowest is None or self.lowest == self.best:
            return ""
        return (
            f"{self.lowest}'s lower CV MAPE is within one standard error; "
            f"ties go to {self.best}, which is exact in ps"
        )


def comparison(fits: list[FamilyFit], *, mode: str, ratio: int) -> Comparison:
    """Summarise :func:`~throughput.fit.compare_families`' fits."""
    scored = [f for f in fits if f.family.selectable and not math.isnan(f.cv_mape)]
    lowest = min(scored, key=lambda f: f.cv_mape).family.name if scored else None
    return Comparison(mode, ratio, fits, select_best(fits).family.name, lowest)
