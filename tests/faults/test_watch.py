"""Cluster mode reads the jobs through a watch: list once, then events; 410 Gone lists again.

Against the fake API server (which serves watches as chunked JSON lines from its change
log, and answers 410 when asked for a resourceVersion older than its compacted history).
"""

from __future__ import annotations

import time

import pytest

from autoscaler.controller.cluster_jobs import ClusterJobs
from kube.client import RetryPolicy, connect
from kube.errors import TargetUnavailable
from kube.job_watch import JobInformer
from tests.support.fault_fakes import SYNC_MODEL, FakeKubeApi, Objects, job_doc

ETJ = ("kale.dev/v1", "ElasticTrainingJob", "ml")


def until(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


@pytest.fixture
def cluster(tmp_path):
    with FakeKubeApi() as api:
        objs = Objects("ml")
        for name in ("a", "b"):
            api.put(objs.statefulset(f"{name}-w", 1))
            api.put(job_doc(name, target={"kind": "DryRun"}, model="ctr-sync.json"))
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc"),
            retry=RetryPolicy(attempts=2, base_s=0.01, sleep=lambda s: None),
        )
        informer = JobInformer(kube, namespaces=["ml"], watch_timeout_s=5, sync_timeout_s=10)
        yield api, informer
        informer.stop()
        api.stop()
        kube.close()


def names(informer: JobInformer) -> set[str]:
    return {o["metadata"]["name"] for o in informer.list()}


def test_the_informer_lists_once_then_follows_events(cluster):
    api, informer = cluster
    informer.start()
    assert names(informer) == {"a", "b"}
    api.put(job_doc("c", target={"kind": "DryRun"}, model="ctr-sync.json"))
    until(lambda: names(informer) == {"a", "b", "c"}, "ADDED seen")
    api.delete(*ETJ, "a")
    until(lambda: names(informer) == {"b", "c"}, "DELETED seen")
    doc = job_doc("b", target={"kind": "DryRun"}, model="ctr-sync.json", priority=7)
    api.put(doc)
    until(
        lambda: (
            {o["spec"]["priority"] for o in informer.list() if o["metadata"]["name"] == "b"} == {7}
        ),
        "MODIFIED seen",
    )
    lists = [r for r in api.calls("GET", "elastictrainingjobs") if "watch" not in r.query]
    assert len(lists) == 1 and informer.lists == 1


def test_a_compacted_history_answers_410_and_the_informer_lists_again(cluster):
    api, informer = cluster
    informer.start()
    assert names(informer) == {"a", "b"}
    # A change, then compaction: whether or not the open watch streamed "d" before the
    # history was forgotten, the version it resumes from (at its 5 s timeout, or at once if
    # it was not open yet) is now too old. (A change *after* compacting would reach an
    # open watch as an ordinary event and never make it resume from a compacted version.)
    api.put(job_doc("d", target={"kind": "DryRun"}, model="ctr-sync.json"))
    api.compact()
    until(lambda: informer.lists >= 2, "a relist after 410", timeout=30)
    until(lambda: "d" in names(informer), "the new job after the relist")


def test_until_the_first_list_the_tick_is_skipped_not_emptied(cluster, tmp_path):
    api, informer = cluster
    api.fail(503, method="GET", path="/elastictrainingjobs", times=1000)
    informer.sync_timeout_s = 0.5
    informer.start()
    with pytest.raises(TargetUnavailable, match="not listed yet"):
        informer.list()
    api.failures.clear()
    until(lambda: informer.lists >= 1, "the first list once the server answers")
    assert names(informer) == {"a", "b"}


def test_status_writes_do_not_make_jobs_validate_again(cluster):
    api, informer = cluster
    informer.start()
    jobs = ClusterJobs(informer.list, models_dir=SYNC_MODEL.parent)
    first = jobs.list()
    assert {e.key for e in first.jobs} == {"ml/a", "ml/b"}
    parses = jobs.parses
    for i in range(5):  # what every tick's status write does: a new resourceVersion
        obj = api.get(*ETJ, "a")
        obj["status"] = {"controller": f"tick {i}"}
        api.put(obj)
    until(
        lambda: any((o.get("status") or {}).get("controller") == "tick 4" for o in informer.list()),
        "the status events",
    )
    again = jobs.list()
    assert {e.key for e in again.jobs} == {"ml/a", "ml/b"}
    assert jobs.parses == parses  # nothing validated again
    spec = api.get(*ETJ, "b")
    spec["spec"]["priority"] = 3
    api.put(spec)
    until(lambda: jobs.list() and jobs.parses == parses + 1, "the spec change validated")
