"""The dashboard in a real headless browser: Debian's Chromium driven by playwright.

The page must load with no network (plotly.js comes from the server), draw its plots and fill
the decisions table on every tab. ``make browser`` installs Chromium (``apt-get install
chromium``) and ``make install`` installs playwright; the test skips, saying why, only when
Chromium is missing and cannot be installed (not root).

Screenshots go to a temporary folder; with ``KALE_UPDATE_SCREENSHOT=1`` the job view is saved
as ``docs/img/dashboard.png`` (the README's picture). ``KALE_DASHBOARD_STATE=DIR`` (and
``KALE_DASHBOARD_SIMULATION=FILE``) serve another state directory instead of the synthetic
one, e.g. the one ``kale demo --state DIR`` leaves.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KALE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "img" / "dashboard.png"
TIMEOUT_MS = 30_000

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _browser_or_skip() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (make install adds it with the dev extra)")
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        hint = (
            "run `make browser` (apt-get install -y chromium)"
            if os.geteuid() == 0
            else "not root, so it cannot be installed here: apt-get install chromium"
        )
        pytest.skip(f"Chromium is missing at {CHROMIUM}: {hint}")
    return CHROMIUM


@pytest.fixture(scope="module")
def page_url(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[str]:
    other = os.environ.get("KALE_DASHBOARD_STATE")
    if not other:
        yield request.getfixturevalue("dashboard_url")
        return
    from kale.dashboard.app import create_app
    from kale.dashboard.server import DashboardServer

    sims = [
        p
        for p in [os.environ.get("KALE_DASHBOARD_SIMULATION"), str(Path(other) / "simulation.json")]
        if p and Path(p).is_file()
    ]
    app = create_app(state_dir=other, sim_results=sims[:1], refresh_s=60.0)
    with DashboardServer(app, port=0) as server:
        yield server.url.rstrip("/")


@pytest.fixture(scope="module")
def page(page_url: str) -> Iterator[object]:
    exe = _browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1000})
            # Offline: anything not served by the dashboard itself is refused.
            context.route(
                "**/*",
                lambda route: (
                    route.continue_() if route.request.url.startswith(page_url) else route.abort()
                ),
            )
            pg = context.new_page()
            errors: list[str] = []
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            pg.errors = errors  # type: ignore[attr-defined]
            pg.goto(page_url + "/", wait_until="load", timeout=TIMEOUT_MS)
            yield pg
        finally:
            browser.close()


def _traces(page, selector: str) -> int:
    page.wait_for_selector(
        f"{selector}.js-plotly-plot .scatterlayer .trace", state="attached", timeout=TIMEOUT_MS
    )
    return page.locator(f"{selector} .scatterlayer .trace").count()


def test_the_cluster_view_draws_the_quota_and_lists_decisions(page):
    assert _traces(page, "#plot-quota") >= 1
    page.wait_for_selector("#decisions-table tbody tr", timeout=TIMEOUT_MS)
    assert page.locator("#decisions-table tbody tr").count() >= 1
    assert page.locator("#jobs-table tbody tr").count() >= 1
    assert page.errors == []


def test_the_job_view_draws_rate_forecast_sizes_delay_and_throughput(page, tmp_path):
    page.evaluate("location.hash = 'job'")
    for plot in ("#plot-rate", "#plot-size", "#plot-delay", "#plot-throughput"):
        assert _traces(page, plot) >= 2, plot
    # The forecast band, its mean, the arrivals and the capacity are all drawn.
    names = page.evaluate("document.getElementById('plot-rate').data.map(t => t.name)")
    assert {"forecast p10–p90", "arrival rate", "capacity f(w)"} <= set(names)
    assert page.locator("#plot-size .scatterlayer .trace .point").count() >= 1  # resizes
    page.wait_for_timeout(300)  # let the last plot settle before the picture
    out = tmp_path / "dashboard.png"
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000
    if os.environ.get("KALE_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, SCREENSHOT)
    assert page.errors == []


def test_the_simulation_view_compares_policies_side_by_side(page):
    page.evaluate("location.hash = 'simulations'")
    page.wait_for_selector(
        "#plot-sim-bars.js-plotly-plot .barlayer .trace", state="attached", timeout=TIMEOUT_MS
    )
    assert page.locator("#plot-sim-bars .barlayer .trace").count() >= 5
    assert page.locator("#sim-table tbody tr").count() >= 2
    assert page.errors == []
