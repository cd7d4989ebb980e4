"""The example job and fitted model the demo drives: files of a source checkout.

The wheel carries the packages only (docs/install.md): ``examples/`` (jobs, fitted models,
profiles) stays in the repository, where ``make demo`` runs. Run from an installed package,
the demo says that it needs a checkout instead of failing on a missing file halfway through
starting the broker.
"""

from __future__ import annotations

from pathlib import Path

from common.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOB = EXAMPLES / "ctr-sync.yaml"
MODEL = EXAMPLES / "models" / "ctr-sync.json"


def from_checkout(path: Path) -> Path:
    """``path`` when it exists or is not one of the examples (a user's own file reports its
    own error); otherwise a UserError saying the demo needs a source checkout."""
    if path.is_file() or not path.is_relative_to(EXAMPLES):
        return path
    raise UserError(
        f"kale demo needs a source checkout: it reads examples/{path.relative_to(EXAMPLES)} "
        f"from the repository, and an installed package has no examples/ (looked in "
        f"{EXAMPLES.parent}); clone the repository and run `make demo` there"
    )
