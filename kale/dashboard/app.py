"""The dashboard app: the JSON API, one static page, and plotly.js from the installed wheel.

Why this module exists: operators must be able to open the dashboard where the controller
runs, often with no internet, so nothing comes from a CDN: ``/static/plotly.min.js`` is the
bundle shipped inside the ``plotly`` Python package, and the API docs page (``/docs``) uses
the Swagger UI files of the ``swagger-ui-bundle`` package. The app only reads: every route is
a GET.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from kale.dashboard import api
from kale.dashboard.data import StateView
from kale.dashboard.hosts import HostCheck, allowed_hosts
from kale.dashboard.simulations import SimulationFiles

STATIC = Path(__file__).resolve().parent / "static"


def plotly_js() -> Path:
    """The plotly.js bundle shipped in the ``plotly`` wheel."""
    import plotly

    path = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
    if not path.is_file():  # pragma: no cover - a broken plotly install
        raise FileNotFoundError(f"plotly.min.js not found at {path}")
    return path


def swagger_dir() -> Path | None:
    """The Swagger UI files of the ``swagger-ui-bundle`` package (None if not installed)."""
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    path = Path(swagger_ui_bundle.swagger_ui_path)
    return path if (path / "swagger-ui-bundle.js").is_file() else None


def create_app(
    *,
    state_dir: str | Path | None = None,
    sim_results: Sequence[str | Path] = (),
    refresh_s: float = 5.0,
    title: str = "Kale dashboard",
    hosts: frozenset[str] | None = None,
) -> FastAPI:
    """The dashboard over ``state_dir`` (a controller's ``stateDir``) and saved simulations.

    ``state_dir`` may not exist yet: the page shows jobs once the controller has written its
    timeline. ``sim_results`` are ``kale simulate --json`` files, re-read when they change.
    ``hosts``: the ``Host`` names answered (default: loopback only; see
    :mod:`kale.dashboard.hosts`).
    """
    app = FastAPI(
        title=title,
        version="1",
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan,
        description="Read-only view of Kale's controller state: per-job arrival "
        "rate vs forecast, sizes and resizes, backlog vs SLO, throughput curves, "
        "GPU quota, decisions, and `kale simulate` comparisons.",
    )
    app.state.view = StateView(state_dir)
    app.state.sims = SimulationFiles(list(sim_results))
    app.state.refresh_s = float(refresh_s)
    app.state.title = title
    app.include_router(api.router)
    app.add_middleware(HostCheck, allowed=hosts if hosts is not None else allowed_hosts())
    swagger = swagger_dir()

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(
            STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"}
        )

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_bundle() -> FileResponse:
        return FileResponse(
            plotly_js(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"}
        )

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        if swagger is None:
            return HTMLResponse(
                "<p>Install swagger-ui-bundle for this page; the schema is at "
                "<a href='/openapi.json'>/openapi.json</a>.</p>"
            )
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title}: API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )

    # Mounted last: the routes above (plotly.min.js under /static) take precedence.
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    if swagger is not None:
        app.mount("/docs-assets", StaticFiles(directory=swagger), name="docs-assets")
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    with contextlib.suppress(Exception):
        app.state.view.close()
