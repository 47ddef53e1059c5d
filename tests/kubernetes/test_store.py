"""The Kubernetes job store on a real apiserver: the JobStore contract the SQLite store keeps —
optimistic concurrency on resourceVersion, status and scale subresources, watch (from the
informer's cache when informed), events."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_provider_primus.contracts.crd import API_VERSION, PLURAL
from airflow_provider_primus.kubernetes.client import resource_path
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.master.store import Conflict, JobExists, JobNotFound, modify
from tests.kube_env import KubeEnv

DOC: dict[str, Any] = {
    "apiVersion": "primus.dev/v1beta1",  # what a store keeps: the newest version
    "kind": "PrimusJob",
    "metadata": {"name": "j"},
    "spec": {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}},
}


@pytest.fixture
def store(kube: KubeEnv) -> KubeJobStore:
    return KubeJobStore(kube.api(), kube.namespace)


def test_create_get_find_delete(store: KubeJobStore) -> None:
    record = store.create("j", DOC, {"team": "ml"})
    assert record.name == "j" and record.version > 0 and record.created > 0
    assert record.spec == DOC and record.status == {}
    assert record.desired == {"scale": {"data": 1}}  # what the scale subresource reads
    assert store.get("j") == record
    store.create("k", {**DOC, "metadata": {"name": "k"}})
    assert [r.name for r in store.find()] == ["j", "k"]
    assert [r.name for r in store.find({"team": "ml"})] == ["j"]
    with pytest.raises(JobExists):
        store.create("j", DOC)
    store.delete("j")
    with pytest.raises(JobNotFound):
        store.get("j")


def test_writes_name_the_version_they_read(store: KubeJobStore, kube: KubeEnv) -> None:
    first = store.create("j", DOC)
    second = store.update("j", first.version, desired={"scale": {"data": 3}, "scale_gen": 1})
    assert second.version > first.version and second.desired["scale"] == {"data": 3}
    with pytest.raises(Conflict):
        store.update("j", first.version, status={"phase": "Running"})
    # Another writer (another process: its own client) changes the job behind this store's back.
    other = KubeJobStore(kube.api(), kube.namespace)
    other.update("j", second.version, status={"phase": "Running"})
    with pytest.raises(Conflict):
        store.update("j", second.version, desired={"stop": True})
    third = modify(store, "j", lambda r: {**r.desired, "stop": True})
    assert third.desired == {"scale": {"data": 3}, "scale_gen": 1, "stop": True}
    assert third.status == {"phase": "Running"}  # the status subresource kept its own write


def test_status_is_written_through_its_subresource_only(store: KubeJobStore, kube: KubeEnv) -> None:
    record = store.create("j", DOC)
    path = resource_path(API_VERSION, PLURAL, kube.namespace, "j")
    obj = kube.api().get(path)
    obj["status"] = {"phase": "Forged"}
    kube.api().replace(path, obj)  # a plain update ignores status
    assert store.get("j").status == {}
    store.update("j", store.get("j").version, status={"phase": "Running", "replicas": {"data": 2}})
    assert store.get("j").status["phase"] == "Running"
    assert store.get("j").version > record.version


def test_the_scale_subresource_writes_desired_data_replicas(store: KubeJobStore, kube: KubeEnv) -> None:
    record = store.create("j", DOC)
    store.update("j", record.version, status={"replicas": {"data": 2}, "selector": "primus.dev/job=j"})
    path = resource_path(API_VERSION, PLURAL, kube.namespace, "j") + "/scale"
    scale = kube.api().get(path)
    assert scale["status"]["replicas"] == 2 and scale["status"]["selector"] == "primus.dev/job=j"
    kube.api().patch(path, {"spec": {"replicas": 5}})
    assert store.get("j").desired["scale"] == {"data": 5}


def test_watch_returns_the_next_version(store: KubeJobStore) -> None:
    record = store.create("j", DOC)
    assert store.watch("j", record.version, timeout_s=1) is None
    timer = threading.Timer(0.3, lambda: store.update("j", record.version, desired={"suspend": True}))
    timer.start()
    changed = store.watch("j", record.version, timeout_s=20)
    timer.join()
    assert changed is not None and changed.desired == {"suspend": True}


def test_an_informed_store_reads_from_its_watch_and_sees_other_writers(kube: KubeEnv) -> None:
    writer = KubeJobStore(kube.api(), kube.namespace)
    record = writer.create("j", DOC)
    api = kube.api()
    informed = KubeJobStore(api, kube.namespace, informer=True)
    assert informed.get("j") == record
    before = api.requests
    for _ in range(20):
        informed.get("j")
    assert api.requests == before  # reads are served by the cache
    writer.update("j", record.version, desired={"stop": True})
    seen = informed.watch("j", record.version, timeout_s=20)
    assert seen is not None and seen.desired == {"stop": True}
    # A stale cache makes a write conflict, and a retry through modify() succeeds.
    latest = modify(informed, "j", lambda r: {**r.desired, "suspend": True})
    assert latest.desired == {"stop": True, "suspend": True}
    informed.close()


def test_events_page_in_order(store: KubeJobStore) -> None:
    store.create("j", DOC)
    a = store.add_event("j", "Submitted", "job 'j' submitted")
    b = store.add_event("j", "ExecutorLaunched", "data-0", "data-0", {"cpu": 1.0})
    c = store.add_event("j", "ExecutorFailed", "data-0 failed", "data-0")
    assert a.seq < b.seq < c.seq
    events = store.events("j")
    assert [(e.type, e.executor, e.data) for e in events] == [
        ("Submitted", None, {}),
        ("ExecutorLaunched", "data-0", {"cpu": 1.0}),
        ("ExecutorFailed", "data-0", {}),
    ]
    assert [e.type for e in store.events("j", after=a.seq)] == ["ExecutorLaunched", "ExecutorFailed"]
    assert [e.type for e in store.events("j", limit=1)] == ["Submitted"]
