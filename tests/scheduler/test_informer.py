"""The reflector: one list, then a watch that resumes, follows bookmarks and re-lists on 410."""

from __future__ import annotations

import threading

import pytest

from kube.client import RetryPolicy, connect
from kube.informer import Reflector, start
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for


class Cache:
    """A sink that keeps objects by namespace/name, as the scheduler's view does."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, kind: str, payload) -> None:
        with self.lock:
            if kind == "SYNC":
                self.objects = {self.key(o): o for o in payload}
                self.events.append(("SYNC", str(len(payload))))
                return
            key = self.key(payload)
            self.events.append((kind, key))
            if kind == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = payload

    @staticmethod
    def key(obj: dict) -> str:
        md = obj["metadata"]
        return f"{md.get('namespace', '')}/{md['name']}"


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.1
        yield fake


@pytest.fixture()
def reflect(api, tmp_path):
    running = []

    def make(resource: str = "pods", **kw) -> tuple[Reflector, Cache]:
        kube = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(attempts=2))
        cache = Cache()
        r = Reflector(
            kube, resource, cache, retry=RetryPolicy(base_s=0.05, max_s=0.2, jitter=0), **kw
        )
        running.append((r, start(r), kube))
        return r, cache

    yield make
    for r, thread, kube in running:
        r.stop()
        thread.join(timeout=10)
        kube.close()


def test_lists_once_then_follows_changes_by_watch(api, reflect):
    api.core.put_pod(pod_doc("a"))
    r, cache = reflect()
    wait_for(r.synced.is_set, what="the first list")
    assert set(cache.objects) == {"ml/a"}
    api.core.put_pod(pod_doc("b"))
    api.core.put_pod(dict(pod_doc("a"), spec={**pod_doc("a")["spec"], "nodeName": "n1"}))
    api.core.delete_pod("ml", "b")
    wait_for(lambda: ("DELETED", "ml/b") in cache.events, what="the deletion")
    assert cache.events == [
        ("SYNC", "1"),
        ("ADDED", "ml/b"),
        ("MODIFIED", "ml/a"),
        ("DELETED", "ml/b"),
    ]
    assert cache.objects["ml/a"]["spec"]["nodeName"] == "n1"
    lists = [q for q in api.calls("GET", "/pods") if q.path == "/api/v1/pods"]
    assert r.stats.lists == 1 and len(lists) == r.stats.lists + r.stats.watches  # no polling


def test_bookmarks_move_the_resume_point_while_nothing_of_ours_changes(api, reflect):
    r, _ = reflect()
    wait_for(r.synced.is_set)
    start_rv = int(r.resource_version)
    node = api.core.put_node(node_doc("n1"))  # another kind: only the version moves
    wait_for(lambda: int(r.resource_version) >= int(node["metadata"]["resourceVersion"]))
    assert r.stats.bookmarks >= 1 and r.stats.events == 0 and int(r.resource_version) > start_rv


def test_a_compacted_history_answers_410_and_the_reflector_relists(api, reflect):
    api.core.put_pod(pod_doc("a"))
    api.core.put_pod(pod_doc("b"))
    r, cache = reflect(watch_timeout_s=1)
    wait_for(r.synced.is_set)
    api.stop()  # the reflector loses its watch while the cluster moves on
    wait_for(lambda: r.stats.errors >= 1, what="a failed re-watch")
    api.core.delete_pod("ml", "a")
    api.core.put_pod(pod_doc("c"))
    api.core.compact()
    api.start()
    wait_for(lambda: r.stats.lists == 2, what="the re-list")
    wait_for(lambda: set(cache.objects) == {"ml/b", "ml/c"}, what="the state after the gap")
    assert r.stats.expired == 1 and api.core.expired_watches == 1


def test_a_dropped_watch_resumes_from_its_version_without_relisting(api, reflect):
    r, cache = reflect(watch_timeout_s=1)
    wait_for(r.synced.is_set)
    api.stop()
    wait_for(lambda: r.stats.errors >= 1)
    api.core.put_pod(pod_doc("x"))  # created while the reflector could not watch
    api.start()
    wait_for(lambda: "ml/x" in cache.objects, what="the missed pod")
    assert r.stats.lists == 1 and r.stats.expired == 0


def test_selectors_reach_the_server(api, reflect):
    api.core.put_pod(pod_doc("mine"))
    api.core.put_pod(pod_doc("theirs", scheduler="default-scheduler"))
    r, cache = reflect(field_selector="spec.schedulerName=kale,spec.nodeName=")
    wait_for(r.synced.is_set)
    assert set(cache.objects) == {"ml/mine"}
    bound = pod_doc("mine", node="n1")
    api.core.put_pod(bound)  # leaves the selection: the watch reports it DELETED
    wait_for(lambda: ("DELETED", "ml/mine") in cache.events)
    assert cache.objects == {}


def test_stop_ends_a_reflector_waiting_out_a_long_backoff(tmp_path):
    api = FakeKubeApi().start()
    kubeconfig = api.kubeconfig(tmp_path / "kc")
    api.stop()  # nobody answers: the list fails and the reflector backs off for a minute
    kube = connect(kubeconfig=kubeconfig, retry=RetryPolicy(base_s=60, max_s=60))
    r = Reflector(kube, "pods", Cache(), retry=RetryPolicy(base_s=60, max_s=60, jitter=0))
    thread = start(r)
    try:
        wait_for(lambda: r.stats.errors >= 1, what="the failed list")
        r.stop()
        thread.join(timeout=10)  # far less than the backoff: the wait ends on stop
        assert not thread.is_alive()
        assert r.stats.lists == 0
    finally:
        r.stop()
        kube.close()


def test_the_scheduler_stops_while_its_requests_are_backing_off(tmp_path):
    from scheduler_harness import Running, config

    from scheduler.app import build

    api = FakeKubeApi().start()
    cfg = config(api, tmp_path)
    api.stop()
    app = build(cfg, sync_events=True)
    for r in app.reflectors:
        r.retry = RetryPolicy(base_s=60, max_s=60, jitter=0)
    running = Running(app)
    wait_for(lambda: all(r.stats.errors for r in app.reflectors), what="failed lists")
    running.stop(timeout=10)  # asserts the replica and its watches ended
    assert not any(t.is_alive() for t in app._threads)
