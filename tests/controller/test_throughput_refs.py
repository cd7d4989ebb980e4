"""A job's throughput model from its own namespace (a ConfigMap) or inline, in both modes.

Cluster mode reads the ConfigMap a job names through the official client against the fake
API server (GET of that one object, in the job's namespace); a changed ConfigMap rebuilds the
job; a missing one is the job's InvalidSpec, naming the map; local mode and ``kale plan``
say in one line that only the cluster controller reads ConfigMaps.
"""

from __future__ import annotations

import copy
import json

import pytest

from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from autoscaler.job.loading import LoadedJob, load_job, parse_job
from autoscaler.job.rules import THETA_COUNT
from common.errors import UserError
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.configmaps import ConfigMaps
from kube.custom_resources import ElasticTrainingJobs
from tests.support.controller_fakes import (
    SYNC_MODEL,
    FakeClock,
    FakeKubeApi,
    TraceMetrics,
    job_doc,
    write_job,
)
from throughput.families import FAMILY_NAMES, get_family
from throughput.model import ThroughputModel

MODEL = json.loads(SYNC_MODEL.read_text(encoding="utf-8"))
INLINE = {
    "family": MODEL["family"],
    "mode": MODEL["mode"],
    "theta": MODEL["theta"],
    "globalBatch": MODEL["global_batch"],
    "ratio": MODEL["ratio"],
}


def config_map(name: str, data: dict, namespace: str = "ml") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"model.json": json.dumps(data)},
    }


def controller_on(api: FakeKubeApi, tmp_path) -> tuple[Controller, object]:
    kube = connect(
        kubeconfig=api.kubeconfig(tmp_path / "kc"),
        retry=RetryPolicy(attempts=2, sleep=lambda s: None),
    )
    crs = ElasticTrainingJobs(kube, namespaces=["ml"])
    clock = FakeClock()
    controller = Controller(
        jobs_source=ClusterJobs(
            crs.list, models_dir=SYNC_MODEL.parent, config_maps=ConfigMaps(kube).read
        ),
        meter_factory=lambda e: TraceMetrics(clock, lambda t: 50_000.0),
        forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
        actuator_factory=lambda e: DryRunActuator(),
        clock=clock,
        status_sink=crs,
        settings=ControllerSettings(identity="kale-0"),
    )
    return controller, kube


def test_theta_counts_match_the_throughput_families():
    for mode in ("sync", "async"):
        for family in FAMILY_NAMES:
            assert THETA_COUNT[(mode, family)] == get_family(mode, family).n_params


def test_inline_coefficients_size_a_job_exactly_as_the_model_file():
    doc = job_doc()
    doc["spec"]["throughput"] = {"inline": INLINE}
    job, problems = parse_job(doc)
    assert job is not None and problems == []
    inline = LoadedJob(job, None).throughput_model()
    filed = ThroughputModel.load(SYNC_MODEL)
    for w in (1, 8, 32, 64):
        p = -(-w // 4)
        assert inline.throughput(w, p, warn=False) == pytest.approx(filed.throughput(w, p))


@pytest.mark.parametrize(
    ("throughput", "field"),
    [
        ({}, "spec.throughput"),  # no source at all
        ({"model": "m.json", "inline": INLINE}, "spec.throughput"),  # two sources
        ({"inline": {**INLINE, "theta": [1.0, 2.0]}}, "spec.throughput.inline.theta"),
        ({"inline": {**INLINE, "theta": [-1.0] * 6}}, "spec.throughput.inline.theta.0"),
        ({"configMapRef": {"name": "Bad_Name"}}, "spec.throughput.configMapRef.name"),
        ({"configMapRef": {"name": "m", "key": "a/b"}}, "spec.throughput.configMapRef.key"),
    ],
)
def test_bad_throughput_references_are_refused_by_field(throughput, field):
    doc = job_doc()
    doc["spec"]["throughput"] = throughput
    _, problems = parse_job(doc)
    assert field in [p for p, _ in problems], problems


def test_the_controller_reads_the_model_from_the_jobs_namespace(tmp_path):
    with FakeKubeApi() as api:
        doc = job_doc("own")
        doc["spec"]["throughput"] = {"configMapRef": {"name": "own-model"}}
        api.put(doc)
        controller, kube = controller_on(api, tmp_path)
        try:
            controller.tick()
            status = api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "own")["status"]
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert ready["reason"] == "InvalidSpec"
            assert "ConfigMap ml/own-model does not exist" in ready["message"]
            api.put(config_map("own-model", MODEL))
            controller.tick()
            rt = controller.runtimes["ml/own"]
            peak = rt.sizing.peak_throughput
            assert peak == pytest.approx(ThroughputModel.load(SYNC_MODEL).peak_throughput, 0.01)
            # A new model in the ConfigMap rebuilds the job with it.
            faster = copy.deepcopy(MODEL)
            faster["theta"] = [t / 2 for t in MODEL["theta"]]
            api.put(config_map("own-model", faster))
            controller.tick()
            assert controller.runtimes["ml/own"] is not rt
            assert controller.runtimes["ml/own"].sizing.peak_throughput > 1.5 * peak
            gets = [r.path for r in api.calls("GET", "/configmaps/")]
            assert gets and set(gets) == {"/api/v1/namespaces/ml/configmaps/own-model"}
        finally:
            controller.close()
            kube.close()


def test_local_mode_says_configmaps_need_the_cluster(tmp_path):
    doc = job_doc("own")
    doc["spec"]["throughput"] = {"configMapRef": {"name": "own-model"}}
    write_job(tmp_path / "jobs", doc)
    clock = FakeClock()
    controller = Controller(
        jobs_source=DirectoryJobs(tmp_path / "jobs"),
        meter_factory=lambda e: TraceMetrics(clock, lambda t: 50_000.0),
        forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
        actuator_factory=lambda e: DryRunActuator(),
        clock=clock,
    )
    controller.tick()
    (problem,) = controller.invalid["ml/own"]
    assert "spec.throughput.configMapRef" in problem and "cluster mode" in problem
    controller.close()
    with pytest.raises(UserError, match="only the controller in cluster mode"):
        load_job(tmp_path / "jobs" / "own.yaml").throughput_model()
