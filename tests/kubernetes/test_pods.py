"""The Kubernetes backend against a real apiserver, scheduler and kwok: pods with the job's requests,
limits, labels, owner reference and secret-backed token; idempotent launches; in-place resizes
through ``pods/resize`` with the pod (UID) unchanged; refusals reported; exits observed."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_primus.contracts.job import KubernetesBackend as KubernetesSettings
from airflow_provider_primus.kubernetes import pods as kube_backend
from airflow_provider_primus.kubernetes.client import KubeApi, resource_path
from airflow_provider_primus.kubernetes.manifests import owner_reference
from airflow_provider_primus.kubernetes.pods import KubernetesBackend, PodTemplate
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.resources.backend import Allotment, LaunchRequest
from tests.kube_env import MASTER_USER, NO_RESIZE_USER, KubeEnv

TOKEN = "s3cr3t-token-value-never-in-a-pod-spec"
MIB = 2**20
DOC: dict[str, Any] = {
    "apiVersion": "primus.dev/v1alpha1",
    "kind": "PrimusJob",
    "metadata": {"name": "j"},
    "spec": {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}},
}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, type_: str, executor: str, data: dict[str, Any]) -> None:
        self.events.append((type_, executor, data))


@pytest.fixture
def job(kube: KubeEnv) -> dict[str, Any]:
    """A PrimusJob with its token Secret, as submission makes them."""
    store = KubeJobStore(kube.api(), kube.namespace)
    store.create("j", DOC)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "j-token"},
        "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
    }
    kube.api().create(resource_path("v1", "secrets", kube.namespace), secret)
    return store.raw("j")


def make_backend(
    kube: KubeEnv, job: dict[str, Any], user: str = MASTER_USER, **kwargs: Any
) -> KubernetesBackend:
    template = PodTemplate(
        job="j",
        namespace=kube.namespace,
        image="airflow-provider-primus:test",
        owner=owner_reference(job),
        documents={"/specs/data.yaml": "apiVersion: primus.dev/v1alpha1\n"},
    )
    return KubernetesBackend(KubeApi(kube.cluster.api_client(user)), template, **kwargs)


@pytest.fixture
def backend(kube: KubeEnv, job: dict[str, Any]) -> Iterator[tuple[KubernetesBackend, Recorder]]:
    recorder = Recorder()
    b = make_backend(kube, job, on_event=recorder)
    yield b, recorder
    b.close()


def command(role: str) -> list[str]:
    sub = "serve-data" if role == "data" else "train"
    return [
        sys.executable,
        "-m",
        "airflow_provider_primus.cli.main",
        sub,
        "/specs/data.yaml",
        "--host",
        "127.0.0.1",
    ]


def running(b: KubernetesBackend, pod: str) -> bool:
    return b.informer.wait_for(
        lambda objs: (objs.get(pod) or {}).get("status", {}).get("phase") == "Running", timeout_s=30
    )


def test_a_launched_executor_is_a_pod_with_the_jobs_contract(
    kube: KubeEnv, job: dict[str, Any], backend: tuple[KubernetesBackend, Recorder]
) -> None:
    b, _ = backend
    env = {"PRIMUS_JOB_TOKEN": TOKEN, "PRIMUS_EXIT_FILE": "/tmp/x.exit"}
    handle = b.launch(
        LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data"), env, incarnation=2)
    )
    assert handle.ref["pod"] == "j-data-0-2"
    pod = kube.api().get(resource_path("v1", "pods", kube.namespace, "j-data-0-2"))
    assert pod["metadata"]["uid"] == handle.ref["uid"]
    labels = pod["metadata"]["labels"]
    assert {k: labels[k] for k in ("primus.dev/job", "primus.dev/role", "primus.dev/index")} == {
        "primus.dev/job": "j",
        "primus.dev/role": "data",
        "primus.dev/index": "0",
    }
    assert labels["primus.dev/incarnation"] == "2" and labels["primus.dev/executor"] == "data-0"
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "PrimusJob",
        "j",
        job["metadata"]["uid"],
        True,
    )
    (c,) = pod["spec"]["containers"]
    quantities = {"cpu": "500m", "memory": str(256 * MIB)}
    assert c["resources"] == {"requests": quantities, "limits": quantities}
    assert {p["resourceName"]: p["restartPolicy"] for p in c["resizePolicy"]} == {
        "cpu": "NotRequired",
        "memory": "NotRequired",
    }
    env_vars = {e["name"]: e for e in c["env"]}
    assert env_vars["PRIMUS_JOB_TOKEN"] == {
        "name": "PRIMUS_JOB_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "j-token", "key": "token"}},
    }
    assert TOKEN not in json.dumps(pod)
    # The Airflow connections the hook resolved, from the job's Secret (absent: none named).
    assert c["envFrom"] == [{"secretRef": {"name": "j-connections", "optional": True}}]
    assert env_vars["PRIMUS_ADVERTISE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert c["command"][:3] == ["python", "-m", "airflow_provider_primus.cli.main"]
    # The pod's own address (the kubelet expands it from the downward API), never every interface.
    assert c["command"][-4:] == ["--host", "$(PRIMUS_ADVERTISE_HOST)", "--port", "50051"]
    assert c["env"][0]["name"] == "PRIMUS_ADVERTISE_HOST"  # defined before the command uses it
    assert c["readinessProbe"]["tcpSocket"]["port"] == "flight"
    assert c["volumeMounts"][0]["mountPath"] == "/specs/data.yaml"
    assert c["volumeMounts"][0]["subPath"] == "document-0.yaml"
    documents = kube.api().get(resource_path("v1", "configmaps", kube.namespace, "j-documents"))
    assert documents["data"] == {"document-0.yaml": "apiVersion: primus.dev/v1alpha1\n"}
    assert running(b, "j-data-0-2")
    scheduled = kube.api().get(resource_path("v1", "pods", kube.namespace, "j-data-0-2"))
    assert scheduled["spec"]["nodeName"].startswith("kwok-node-")  # bound by the real scheduler
    assert b.observe([handle])["data-0"].alive


def test_launching_the_same_incarnation_again_adopts_the_pod(
    kube: KubeEnv, job: dict[str, Any], backend: tuple[KubernetesBackend, Recorder]
) -> None:
    """A master that died between creating a pod and recording it launches it again: no duplicate."""
    b, _ = backend
    first = b.launch(
        LaunchRequest("trainer-0", "trainer", 0, Allotment(1.0, 512 * MIB), command("trainer"), {})
    )
    again = b.launch(
        LaunchRequest("trainer-0", "trainer", 0, Allotment(2.0, 1024 * MIB), command("trainer"), {})
    )
    assert again.ref["uid"] == first.ref["uid"]
    assert again.allotment == first.allotment  # what the pod really has
    pods = kube.api().get(resource_path("v1", "pods", kube.namespace), labelSelector="primus.dev/job=j")
    assert [p["metadata"]["name"] for p in pods["items"]] == ["j-trainer-0-0"]
    assert b.adopt(first)


def test_a_resize_is_applied_in_place(kube: KubeEnv, backend: tuple[KubernetesBackend, Recorder]) -> None:
    b, recorder = backend
    handle = b.launch(LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data"), {}))
    assert running(b, "j-data-0-0")
    resized = b.resize(handle, Allotment(1.5, 512 * MIB))
    assert resized.allotment == Allotment(1.5, 512 * MIB) and not recorder.events
    pod = kube.api().get(resource_path("v1", "pods", kube.namespace, "j-data-0-0"))
    assert pod["metadata"]["uid"] == handle.ref["uid"]  # the same pod, never recreated
    quantities = {"cpu": "1500m", "memory": str(512 * MIB)}
    assert pod["spec"]["containers"][0]["resources"] == {"requests": quantities, "limits": quantities}
    assert b.observe([resized])["data-0"].alive


def test_a_refused_resize_is_reported_and_the_allotment_kept(kube: KubeEnv, job: dict[str, Any]) -> None:
    """A cluster that refuses ``pods/resize`` (here: RBAC without it) gets a ResizeRefused event and,
    by default, the executor keeps its allotment; ``recreate`` replaces the pod instead."""
    recorder = Recorder()
    b = make_backend(kube, job, user=NO_RESIZE_USER, on_event=recorder)
    try:
        handle = b.launch(LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data"), {}))
        kept = b.resize(handle, Allotment(1.0, 256 * MIB))
        assert kept.allotment == handle.allotment
        ((type_, executor, data),) = recorder.events
        assert (type_, executor, data["status"]) == ("ResizeRefused", "data-0", 403)
        assert "keeping the current allotment" in data["reason"]
        b.on_resize_refused = "recreate"
        replaced = b.resize(handle, Allotment(1.0, 256 * MIB))
        assert replaced.allotment == Allotment(1.0, 256 * MIB)
        assert b.informer.wait_for(lambda objs: "j-data-0-0" not in objs, timeout_s=30)
        obs = b.observe([handle])["data-0"]
        assert not obs.alive and "recreated" in str(obs.reason)
    finally:
        b.close()


def test_exits_terminations_and_orphans_are_observed(
    kube: KubeEnv, backend: tuple[KubernetesBackend, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    b, recorder = backend
    failing = b.launch(LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data"), {}))
    stopped = b.launch(LaunchRequest("data-1", "data", 1, Allotment(0.5, 256 * MIB), command("data"), {}))
    assert running(b, "j-data-0-0") and running(b, "j-data-1-0")
    kube.api().patch(
        resource_path("v1", "pods", kube.namespace, "j-data-0-0"),
        {"metadata": {"annotations": {"primus.dev/kwok-exit-code": "3"}}},
    )
    assert b.informer.wait_for(
        lambda objs: objs["j-data-0-0"].get("status", {}).get("phase") == "Failed", timeout_s=30
    )
    b.terminate(stopped, grace_s=0)
    assert b.informer.wait_for(lambda objs: "j-data-1-0" not in objs, timeout_s=30)
    seen = b.observe([failing, stopped])
    assert (seen["data-0"].alive, seen["data-0"].exit_code, seen["data-0"].reason) == (False, 3, "exited")
    assert (seen["data-1"].alive, seen["data-1"].reason) == (False, "terminated")
    assert not b.adopt(failing) and not b.adopt(stopped)
    # A pod of this job that no handle names (made by a master that died before recording it).
    monkeypatch.setattr(kube_backend, "ORPHAN_GRACE_S", 0.0)
    b.launch(LaunchRequest("data-2", "data", 2, Allotment(0.5, 256 * MIB), command("data"), {}))
    assert b.informer.wait_for(lambda objs: "j-data-2-0" in objs, timeout_s=30)
    b.observe([failing])
    assert b.informer.wait_for(lambda objs: "j-data-2-0" not in objs, timeout_s=30)
    assert ("OrphanDeleted", "data-2") in [(t, e) for t, e, _ in recorder.events]
    # A finished pod no handle names any more (its executor done) is kept, like a Job's, and is no
    # orphan: it holds nothing, and its log stays readable.
    b.observe([])
    assert ("OrphanDeleted", "data-0") not in [(t, e) for t, e, _ in recorder.events]
    assert (
        kube.api().get(resource_path("v1", "pods", kube.namespace, "j-data-0-0"))["status"]["phase"]
        == "Failed"
    )


def test_a_pod_the_watch_has_not_delivered_yet_is_not_taken_for_deleted(
    kube: KubeEnv, backend: tuple[KubernetesBackend, Recorder]
) -> None:
    """The informer lags the API server (on a loaded machine by whole reconcile passes): a pod just
    created is still the executor's pod, and only the API server can say it is gone."""
    b, _ = backend
    b.informer.stop()  # the watch delivers nothing more from here: the lag made permanent
    handle = b.launch(LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data"), {}))
    assert b.informer.get("j-data-0-0") is None
    assert b.observe([handle])["data-0"].alive
    kube.api().delete(resource_path("v1", "pods", kube.namespace, "j-data-0-0"), {"gracePeriodSeconds": 0})
    deadline = time.monotonic() + 30
    while (seen := b.observe([handle])["data-0"]).alive and time.monotonic() < deadline:
        time.sleep(0.2)  # kwok finalises the deletion; the API server is asked directly each pass
    assert (seen.alive, seen.reason) == (False, "pod deleted")


def test_a_tls_job_mounts_its_ca_secret_and_an_asked_wildcard_is_kept(
    kube: KubeEnv, backend: tuple[KubernetesBackend, Recorder]
) -> None:
    """The master's TLS folder becomes the job's TLS Secret, mounted read-only where the executor's
    ``$PRIMUS_TLS_DIR`` points; a job that asked for ``0.0.0.0`` binds it (and advertises its IP)."""
    b, _ = backend
    env = {"PRIMUS_JOB_TOKEN": TOKEN, "PRIMUS_TLS_DIR": "/home/me/.primus/jobs/j/tls"}
    wildcard = [*command("data")[:-1], "0.0.0.0"]
    b.launch(LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), wildcard, env))
    pod = kube.api().get(resource_path("v1", "pods", kube.namespace, "j-data-0-0"))
    (c,) = pod["spec"]["containers"]
    env_vars = {e["name"]: e for e in c["env"]}
    assert env_vars["PRIMUS_TLS_DIR"] == {"name": "PRIMUS_TLS_DIR", "value": "/var/run/primus/tls"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "j-tls", "defaultMode": 0o440}
    assert pod["spec"]["securityContext"] == {"fsGroup": 10001}  # a non-root image user reads it
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/var/run/primus/tls", "readOnly": True}
    assert c["command"][-4:] == ["--host", "0.0.0.0", "--port", "50051"]
    assert "/home/me" not in json.dumps(pod)


def test_object_store_secrets_reach_executor_pods_by_secret_key_ref() -> None:
    from airflow_provider_primus.contracts import load_data_spec
    from airflow_provider_primus.kubernetes.pods import storage_secret_env

    source = {
        "name": "history",
        "type": "files",
        "format": "parquet",
        "uri": "s3://lake/clicks",
        "path_template": "{date}",
        "granularity": "day",
        "storage": {"endpoint": "http://minio:9000", "credentials": {"secret": {"name": "lake-keys"}}},
        "schema": {"sparse": ["user_id"], "dense": ["price"], "label": {"column": "clicked"}},
    }
    data = load_data_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "d"},
            "spec": {"sources": [source]},
        }
    )
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in storage_secret_env(data)}
    assert env == {
        "PRIMUS_S3_SECRET_LAKE_KEYS_ACCESS_KEY_ID": {"name": "lake-keys", "key": "access_key_id"},
        "PRIMUS_S3_SECRET_LAKE_KEYS_SECRET_ACCESS_KEY": {"name": "lake-keys", "key": "secret_access_key"},
    }
    # Checkpoints in another bucket with their own Secret: the trainers need those keys too.
    from airflow_provider_primus.contracts.loader import load_training_spec

    ckpt = {"endpoint": "http://minio:9000", "credentials": {"secret": {"name": "ckpt-keys"}}}
    training = load_training_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "t"},
            "spec": {"checkpoint": {"dir": "s3://models/ckpt", "storage": ckpt}},
        }
    )
    names = [e["name"] for e in storage_secret_env(data, training)]
    assert names == [
        *env,
        "PRIMUS_S3_SECRET_CKPT_KEYS_ACCESS_KEY_ID",
        "PRIMUS_S3_SECRET_CKPT_KEYS_SECRET_ACCESS_KEY",
    ]


def test_role_images_volumes_and_the_dispatcher_reach_the_pod_and_an_adopter_redirects_it(
    kube: KubeEnv, job: dict[str, Any]
) -> None:
    """The job's ``backend.kubernetes``: each role's image, the volumes it mounts (a claim, a
    ConfigMap, an emptyDir) and PRIMUS_HOME; the dispatcher's address as an annotation the pod reads
    through the downward API, which a new master that adopts the pod rewrites to its own."""
    settings = KubernetesSettings.model_validate({
        "image": "primus-data:1", "images": {"trainer": "primus-trainer:1"}, "image_pull_policy": "Never",
        "volumes": [{"name": "work", "persistent_volume_claim": {"claim_name": "primus-work"}},
                    {"name": "conf", "config_map": {"name": "conf", "optional": True}},
                    {"name": "scratch", "empty_dir": {"size_limit": "256Mi"}}],
        "mounts": {"trainer": [{"volume": "work", "path": "/var/lib/primus", "sub_path": "home"},
                               {"volume": "conf", "path": "/etc/conf", "read_only": True},
                               {"volume": "scratch", "path": "/tmp/scratch"}],
                   "data": [{"volume": "work", "path": "/data", "read_only": True}]},
    })  # fmt: skip
    template = PodTemplate(job="j", namespace=kube.namespace, image="unused:0", owner=owner_reference(job),
                           documents={"/specs/data.yaml": "apiVersion: primus.dev/v1alpha1\n"},
                           settings=settings)  # fmt: skip
    first = KubernetesBackend(KubeApi(kube.cluster.api_client(MASTER_USER)), template)
    here = ["--dispatcher", "grpc://10.1.0.5:7000"]
    try:
        trainer = first.launch(
            LaunchRequest("trainer-0", "trainer", 0, Allotment(1, 512 * MIB), command("trainer") + here, {})
        )
        data = first.launch(
            LaunchRequest("data-0", "data", 0, Allotment(0.5, 256 * MIB), command("data") + here, {})
        )
    finally:
        first.close()
    pods = {h.ref["pod"]: kube.api().get(resource_path("v1", "pods", kube.namespace, h.ref["pod"]))
            for h in (trainer, data)}  # fmt: skip
    pod = pods["j-trainer-0-0"]
    (c,) = pod["spec"]["containers"]
    assert (c["image"], c["imagePullPolicy"]) == ("primus-trainer:1", "Never")
    assert pods["j-data-0-0"]["spec"]["containers"][0]["image"] == "primus-data:1"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["v-work"]["persistentVolumeClaim"] == {"claimName": "primus-work"}
    assert volumes["v-conf"]["configMap"]["name"] == "conf" and volumes["v-conf"]["configMap"]["optional"]
    assert volumes["v-scratch"]["emptyDir"] == {"sizeLimit": "256Mi"}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/var/lib/primus"] == {"name": "v-work", "mountPath": "/var/lib/primus", "subPath": "home"}
    assert "home" not in volumes  # the claim is PRIMUS_HOME; no emptyDir under it
    assert mounts["/etc/conf"]["readOnly"] and mounts["/specs/data.yaml"]["subPath"] == "document-0.yaml"
    data_pod = pods["j-data-0-0"]["spec"]
    assert {v["name"] for v in data_pod["volumes"]} >= {"documents", "v-work", "home", "pod-info"}
    assert pod["metadata"]["annotations"]["primus.dev/dispatcher"] == "grpc://10.1.0.5:7000"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["PRIMUS_DISPATCHER_FILE"] == "/etc/primus/pod/dispatcher"
    assert volumes["pod-info"]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['primus.dev/dispatcher']"
    )
    # A new master (another pod, another address) adopts the pods and tells them where it is.
    second = KubernetesBackend(KubeApi(kube.cluster.api_client(MASTER_USER)), template,
                               dispatcher=lambda: "grpc://10.1.0.9:7000")  # fmt: skip
    try:
        second.informer.wait_for(lambda objs: "j-trainer-0-0" in objs, timeout_s=30)
        assert second.adopt(trainer) and second.adopt(data)
    finally:
        second.close()
    for name in pods:
        now = kube.api().get(resource_path("v1", "pods", kube.namespace, name))
        assert now["metadata"]["annotations"]["primus.dev/dispatcher"] == "grpc://10.1.0.9:7000"
        assert now["metadata"]["uid"] == pods[name]["metadata"]["uid"]
