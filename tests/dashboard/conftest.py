"""Fixtures of the dashboard tests: a controller state directory, a simulation result, and
the dashboard served over both on a free local port."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dashboard_fakes import T0, build_state


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory after 150 one-minute ticks of two jobs (rising and falling load)."""
    return build_state(tmp_path_factory.mktemp("kale-state"))


@pytest.fixture(scope="session")
def sim_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `kale simulate --json`-shaped result, with the per-step series `kale demo` adds."""
    path = tmp_path_factory.mktemp("sim") / "result.json"
    times = [T0 + 600.0 * i for i in range(6)]
    path.write_text(
        json.dumps(
            {
                "policies": {
                    "kale": {
                        "slo_violation_rate": 0.01,
                        "cumulative_delay_min": 40.0,
                        "downtime_min": 30.0,
                        "rescale_count": 6,
                        "gpu_hours": 120.0,
                        "lower_bound_ratio": 1.1,
                        "mean_workers": 10.0,
                        "max_delay_min": 11.0,
                    },
                    "hpa": {
                        "slo_violation_rate": 0.2,
                        "cumulative_delay_min": 400.0,
                        "downtime_min": 90.0,
                        "rescale_count": 18,
                        "gpu_hours": 140.0,
                        "lower_bound_ratio": 1.3,
                        "mean_workers": 11.0,
                        "max_delay_min": 35.0,
                    },
                },
                "lower_bound_gpu_hours": 109.0,
                "job": "ml/ctr",
                "interval_s": 600.0,
                "steps": 6,
                "slo_s": 600.0,
                "series": {
                    "time": times,
                    "arrivals": [1e4, 2e4, 5e4, 8e4, 5e4, 2e4],
                    "policies": {
                        "kale": {"workers": [1, 2, 4, 6, 4, 2], "delay_min": [0, 0, 1, 2, 0, 0]},
                        "hpa": {"workers": [1, 1, 2, 4, 6, 4], "delay_min": [0, 3, 9, 14, 6, 0]},
                    },
                },
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="session")
def dashboard_url(state_dir: Path, sim_result: Path) -> Iterator[str]:
    """The dashboard over ``state_dir`` and ``sim_result``, served on a free local port."""
    from kale.dashboard.app import create_app
    from kale.dashboard.server import DashboardServer

    app = create_app(state_dir=state_dir, sim_results=[sim_result], refresh_s=1.0)
    with DashboardServer(app, port=0) as server:
        yield server.url.rstrip("/")
