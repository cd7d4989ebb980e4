"""The dashboard's JSON API: GET routes only (the dashboard never changes anything).

Every route returns one of the shapes built in :mod:`kale.dashboard.data`; FastAPI
documents them at ``/docs`` (served from local files, so it works offline) and
``/openapi.json``. Any other method on these paths answers 405.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from kale.dashboard import data
from kale.dashboard.simulations import SimulationFiles


def _view(request: Request) -> data.StateView:
    return request.app.state.view


def _sims(request: Request) -> SimulationFiles:
    return request.app.state.sims


router = APIRouter(prefix="/api")


@router.get("/meta", summary="What this dashboard shows")
def meta(request: Request) -> dict[str, Any]:
    """The state directory's name, refresh period, quota, display units and simulations."""
    view = _view(request)
    m = view.meta()
    d = data.Display.from_meta(m)
    return {
        "title": request.app.state.title,
        # The directory's name only: an absolute path tells a reader about the host.
        "state_dir": view.state_dir.name if view.state_dir is not None else None,
        "has_timeline": view.store() is not None,
        "refresh_s": request.app.state.refresh_s,
        "quota_gpus": m.get("quota_gpus"),
        "interval_s": d.duration(m.get("interval_s")),
        "display": d.to_dict(),
        "simulations": len(_sims(request).paths),
        "now": d.time(time.time()),
    }


@router.get("/jobs", summary="Every job, as of its latest tick")
def jobs(request: Request) -> dict[str, Any]:
    """Size, decision, arrival rate, capacity, backlog and oldest age of each job."""
    return data.jobs(_view(request))


@router.get("/jobs/{job:path}/series", summary="One job's time series")
def job_series(
    request: Request,
    job: str,
    limit: int = Query(
        data.DEFAULT_POINTS, ge=1, le=data.MAX_POINTS, description="Newest ticks to return."
    ),
    since: float | None = Query(
        None, description="Only ticks at or after this time (epoch seconds, display time)."
    ),
) -> dict[str, Any]:
    """Arrival rate vs the forecast made one lead time earlier (mean, p10–p90), capacity
    f(w) of the current size, workers and PS with every resize and its reason, backlog and
    oldest unconsumed age against the SLO, and the throughput curve with the operating point
    and the peak. ``job`` is ``namespace/name`` (or a name that is unique)."""
    out = data.series(_view(request), job, limit=limit, since=since)
    if out is None:
        raise HTTPException(status_code=404, detail=f"no job {job!r} in the timeline")
    return out


@router.get("/decisions", summary="Recent decisions")
def decisions(
    request: Request,
    limit: int = Query(50, ge=1, le=1000),
    job: str | None = Query(None, description="Only this job (namespace/name)."),
) -> dict[str, Any]:
    """Resizes, failed ticks and changes of action, newest first, with their reasons."""
    return data.decisions(_view(request), limit=limit, job=job)


@router.get("/cluster", summary="GPU quota used vs available")
def cluster(
    request: Request, limit: int = Query(data.DEFAULT_POINTS, ge=1, le=data.MAX_POINTS)
) -> dict[str, Any]:
    """GPUs held by all jobs per tick (a resizing job holds the larger size) and the quota."""
    return data.cluster(_view(request), limit=limit)


@router.get("/simulations", summary="Loaded `kale simulate` results")
def simulations(request: Request) -> dict[str, Any]:
    """The result files given with ``--simulation``, with their policy names."""
    return _sims(request).index()


@router.get("/simulations/{sim_id}", summary="One `kale simulate` result")
def simulation(request: Request, sim_id: int) -> dict[str, Any]:
    """The result as ``kale simulate --json`` wrote it: ``policies`` → metrics (plus per-step
    ``series`` when the writer included them, as ``kale demo`` does)."""
    out = _sims(request).get(sim_id)
    if out is None:
        raise HTTPException(status_code=404, detail=f"no simulation {sim_id}")
    return out


@router.get("/health", summary="Liveness")
def health() -> dict[str, bool]:
    return {"ok": True}
