"""The dashboard's JSON API over a state directory written by real controller ticks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autoscaler.controller.timeline import TimelineStore, lead_steps
from kale.dashboard import data
from kale.dashboard.simulations import SimulationFiles
from tests.support.dashboard_fakes import QUOTA, TICKS, build_state


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read()
            ctype = r.headers.get("content-type", "")
            return r.status, json.loads(body) if "json" in ctype else {"text": body.decode()}
    except urllib.error.HTTPError as err:
        return err.code, {}


def request(url: str, method: str) -> int:
    req = urllib.request.Request(url, method=method, data=b"{}" if method != "DELETE" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def test_jobs_lists_every_job_with_its_latest_size_and_decision(dashboard_url):
    status, body = get(f"{dashboard_url}/api/jobs")
    assert status == 200
    jobs = {j["key"]: j for j in body["jobs"]}
    assert set(jobs) == {"ml/ctr", "ml/ads"}
    ctr = jobs["ml/ctr"]
    assert ctr["workers"] >= 1 and ctr["ps"] == -(-ctr["workers"] // 4)
    assert ctr["arrival_rate"] > 0 and ctr["capacity"] > 0
    assert ctr["slo_s"] == 600 and ctr["action"]
    assert ctr["ready"]["status"] == "True"  # read from the status file
    assert ctr["info"]["peak_workers"] == 49 and "capacity" not in ctr["info"]


def test_series_has_one_point_per_tick_and_the_forecast_one_lead_time_ahead(dashboard_url):
    status, s = get(f"{dashboard_url}/api/jobs/ml/ctr/series")
    assert status == 200
    n = len(s["time"])
    assert n == TICKS
    for key in (
        "arrival_rate",
        "consumption_rate",
        "capacity",
        "workers",
        "ps",
        "planned_workers",
        "backlog",
        "oldest_age_s",
        "action",
        "why",
    ):
        assert len(s[key]) == n, key
    assert s["time"] == sorted(s["time"])
    fc = s["forecast"]
    assert len(fc["time"]) == len(fc["mean"]) == len(fc["p10"]) == len(fc["p90"]) > 0
    assert all(lo <= m <= hi for lo, m, hi in zip(fc["p10"], fc["mean"], fc["p90"], strict=True))
    lead = lead_steps(300.0, 60.0, 60)
    assert fc["lead_s"] == lead * 60.0
    # The forecast of a step is drawn at the end of that step, lead + 1 steps after the
    # tick that made it: it overlaps the arrivals measured then.
    assert fc["time"][0] == pytest.approx(s["time"][0] + (lead + 1) * 60.0, abs=60.0)
    assert s["slo_s"] == 600


def test_series_marks_each_resize_with_its_reason(dashboard_url):
    _, s = get(f"{dashboard_url}/api/jobs/ml/ctr/series")
    resizes = s["resizes"]
    assert resizes, "the rising load must have caused resizes"
    for r in resizes:
        assert r["to_workers"] != r["from_workers"] and r["why"]
        assert r["time"] in s["time"]
    ups = [r for r in resizes if r["to_workers"] > r["from_workers"]]
    assert ups and all(r["action"].startswith("scale_up") for r in ups)


def test_series_carries_the_throughput_curve_with_operating_point_and_peak(dashboard_url):
    _, s = get(f"{dashboard_url}/api/jobs/ml/ctr/series")
    tp = s["throughput"]
    assert tp["workers"] == list(range(1, 65)) and len(tp["capacity"]) == 64
    assert tp["peak_workers"] == 49
    assert tp["peak_throughput"] == pytest.approx(max(tp["capacity"]))
    assert tp["current_workers"] == s["workers"][-1]
    assert tp["current_throughput"] == pytest.approx(tp["capacity"][tp["current_workers"] - 1])


def test_a_unique_name_finds_its_job_and_an_unknown_one_is_404(dashboard_url):
    assert get(f"{dashboard_url}/api/jobs/ctr/series?limit=5")[1]["job"] == "ml/ctr"
    assert len(get(f"{dashboard_url}/api/jobs/ctr/series?limit=5")[1]["time"]) == 5
    assert get(f"{dashboard_url}/api/jobs/ml/nope/series")[0] == 404
    assert get(f"{dashboard_url}/api/jobs/ctr/series?limit=0")[0] == 422


def test_decisions_are_newest_first_and_include_every_resize(dashboard_url):
    _, body = get(f"{dashboard_url}/api/decisions?limit=1000")
    rows = body["decisions"]
    assert rows and [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
    _, s = get(f"{dashboard_url}/api/jobs/ml/ctr/series")
    resized = [r for r in rows if r["resized"] and r["job"] == "ml/ctr"]
    assert len(resized) == len(s["resizes"])
    assert all(r["why"] and r["reason"]["action"] == r["action"] for r in resized)
    _, one = get(f"{dashboard_url}/api/decisions?job=ml/ads&limit=3")
    assert len(one["decisions"]) == 3 and {r["job"] for r in one["decisions"]} == {"ml/ads"}


def test_cluster_sums_the_gpus_of_all_jobs_per_tick_against_the_quota(dashboard_url):
    _, c = get(f"{dashboard_url}/api/cluster")
    assert c["quota_gpus"] == QUOTA
    assert len(c["time"]) == TICKS and set(c["jobs"]) == {2}
    assert max(c["gpus"]) <= QUOTA and c["gpus_now"] == c["gpus"][-1]
    assert c["gpu_hours"] == pytest.approx(sum(c["gpus"]) / 60.0)


def test_simulations_are_listed_and_served_side_by_side(dashboard_url, sim_result):
    _, index = get(f"{dashboard_url}/api/simulations")
    (entry,) = index["simulations"]
    assert entry["name"] == sim_result.name and entry["policies"] == ["hpa", "kale"]
    status, sim = get(f"{dashboard_url}/api/simulations/0")
    assert status == 200 and sim["policies"]["hpa"]["rescale_count"] == 18
    assert set(sim["series"]["policies"]) == {"kale", "hpa"}
    assert get(f"{dashboard_url}/api/simulations/7")[0] == 404


def test_a_file_that_is_not_a_simulation_result_says_so(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": 3}')
    sims = SimulationFiles([bad, tmp_path / "missing.json"])
    errors = [s["error"] for s in sims.index()["simulations"]]
    assert 'no "policies"' in errors[0] and "cannot read" in errors[1]
    assert sims.get(0)["error"] == errors[0]


def test_the_api_is_documented_by_the_openapi_page(dashboard_url):
    status, schema = get(f"{dashboard_url}/openapi.json")
    assert status == 200
    paths = set(schema["paths"])
    assert {
        "/api/jobs",
        "/api/jobs/{job}/series",
        "/api/decisions",
        "/api/cluster",
        "/api/simulations",
        "/api/simulations/{sim_id}",
        "/api/meta",
    } <= paths
    status, page = get(f"{dashboard_url}/docs")
    assert status == 200 and "swagger" in page["text"].lower()
    assert "cdn" not in page["text"].lower()  # served from the installed package
    assert get(f"{dashboard_url}/docs-assets/swagger-ui-bundle.js")[0] == 200


def test_the_page_and_plotly_are_served_locally(dashboard_url):
    status, page = get(f"{dashboard_url}/")
    assert status == 200 and '<script src="/static/plotly.min.js">' in page["text"]
    assert "http" not in page["text"].split("<body>")[0]  # nothing from the network
    with urllib.request.urlopen(f"{dashboard_url}/static/plotly.min.js", timeout=10) as r:
        assert r.status == 200 and len(r.read()) > 1_000_000
    assert get(f"{dashboard_url}/static/app.js")[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize(
    "path", ["/api/jobs", "/api/jobs/ml/ctr/series", "/api/decisions", "/", "/static/app.js"]
)
def test_the_dashboard_is_read_only(dashboard_url, method, path):
    assert request(f"{dashboard_url}{path}", method) == 405


def test_a_state_dir_without_a_controller_yet_shows_empty_views(tmp_path):
    view = data.StateView(tmp_path / "not-yet")
    assert data.jobs(view)["jobs"] == []
    assert data.series(view, "ml/ctr") is None
    assert data.decisions(view) == {"decisions": []}
    assert data.cluster(view)["time"] == []


def test_a_compressed_run_is_shown_in_the_units_of_its_trace(tmp_path):
    state = build_state(tmp_path / "state", ticks=12, jobs=("ctr",))
    plain = data.series(data.StateView(state), "ml/ctr")
    store = TimelineStore(state / "timeline.sqlite")
    store.set_meta(
        display={
            "speedup": 60.0,
            "wall_origin": 1e9,
            "trace_origin": 2e9,
            "rate_scale": 10.0,
            "note": "compressed",
        }
    )
    store.close()
    warped = data.series(data.StateView(state), "ml/ctr")
    assert warped["time"][0] == 2e9 + (plain["time"][0] - 1e9) * 60.0
    assert warped["arrival_rate"][3] == pytest.approx(plain["arrival_rate"][3] * 10.0)
    assert warped["backlog"][3] == pytest.approx(plain["backlog"][3] * 600.0)
    assert warped["slo_s"] == plain["slo_s"] * 60.0
    assert warped["throughput"]["peak_throughput"] == pytest.approx(
        plain["throughput"]["peak_throughput"] * 10.0
    )
    since = warped["time"][5]
    assert data.series(data.StateView(state), "ml/ctr", since=since)["time"][0] == since


def test_the_timeline_reads_back_after_the_controller_closed(state_dir: Path):
    store = TimelineStore(state_dir / "timeline.sqlite", readonly=True)
    try:
        assert set(store.jobs()) == {"ml/ctr", "ml/ads"}
        assert len(store.rows("ml/ctr")) == TICKS
    finally:
        store.close()
