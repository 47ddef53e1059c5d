"""``PrimusSubmitJobOperator(backend="kubernetes")`` on a real apiserver: it submits through the
cncf-kubernetes ``KubernetesHook`` of an Airflow connection (the ``airflow`` user, bound to the
shipped submitter Role), a retry reattaches to the job by its labels, and a cancel deletes it."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_primus.contracts.crd import API_VERSION, PLURAL
from airflow_provider_primus.data.sources.kafka_client import connection_env_name
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.kubernetes.client import resource_path
from airflow_provider_primus.operators.base import job_name_for
from airflow_provider_primus.operators.job import PrimusSubmitJobOperator, label_value, run_labels
from airflow_provider_primus.triggers.job import PrimusJobTrigger
from tests.kube_env import SUBMITTER_USER, KubeEnv
from tests.master.conftest import JobWorld
from tests.operators.test_job_operators import context
from tests.training.conftest import SCHEMA

RUN_ID = "scheduled__2026-05-01T00:00:00+00:00"


@pytest.fixture
def kube_conn(kube: KubeEnv, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection of the cncf-kubernetes provider, pointing at the test cluster."""
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kube.kubeconfig(SUBMITTER_USER))}}
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_KUBE", json.dumps(conn))
    return "primus_kube"


def operator(job_world: JobWorld, kube: KubeEnv, conn_id: str, **kwargs: Any) -> PrimusSubmitJobOperator:
    spec = {"backend": {"type": "kubernetes", "kubernetes": {"namespace": kube.namespace}}}
    return PrimusSubmitJobOperator(
        task_id="train",
        job=str(job_world.job("train", **spec)),
        backend="kubernetes",
        namespace=kube.namespace,
        kubernetes_conn_id=conn_id,
        start_master=False,  # kwok runs no containers: this test is about the resource's life
        poll_interval=0.2,
        **kwargs,
    )


def test_label_values_are_valid_kubernetes_labels() -> None:
    assert label_value("manual__2026-05-01") == "manual__2026-05-01"
    value = label_value(RUN_ID)
    assert value.startswith("scheduled__2026-05-01T00-00-00-00-00") and len(value) <= 63
    assert label_value(RUN_ID) == value and label_value(RUN_ID + "x") != value
    assert len(label_value("x" * 100)) <= 63


def test_submit_reattach_and_cancel(job_world: JobWorld, kube: KubeEnv, kube_conn: str) -> None:
    op = operator(job_world, kube, kube_conn)
    ctx = context(RUN_ID)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    name = job_name_for(op.dag_id, "train", RUN_ID)
    assert isinstance(trigger, PrimusJobTrigger) and trigger.job == name
    assert trigger.serialize()[1]["hook_params"] == {
        "backend": "kubernetes",
        "namespace": kube.namespace,
        "kubernetes_conn_id": kube_conn,
    }
    hook = PrimusHook(backend="kubernetes", namespace=kube.namespace, kubernetes_conn_id=kube_conn)
    record = hook.get_job(name)
    assert record is not None
    assert record.labels == run_labels(op.dag_id, "train", RUN_ID)
    obj = kube.api().get(resource_path(API_VERSION, PLURAL, kube.namespace, name))
    assert obj["metadata"]["labels"]["airflow.task_id"] == "train"
    uid = obj["metadata"]["uid"]

    # A retry of the same run (another worker, a fresh operator) reattaches: no second job.
    again = operator(job_world, kube, kube_conn)
    with pytest.raises(TaskDeferred):
        again.execute(context(RUN_ID))
    listing = kube.api().get(resource_path(API_VERSION, PLURAL, kube.namespace))
    assert [(o["metadata"]["name"], o["metadata"]["uid"]) for o in listing["items"]] == [(name, uid)]

    # Cancelling the deferred task: the trigger's on_kill deletes the PrimusJob.
    restored = PrimusJobTrigger(**trigger.serialize()[1])
    asyncio.run(restored.on_kill())
    assert hook.get_job(name) is None
    events = asyncio.run(_first(restored))
    assert events["status"] == "error" and "no job named" in events["message"]


def test_a_worker_cancel_deletes_the_job(job_world: JobWorld, kube: KubeEnv, kube_conn: str) -> None:
    op = operator(job_world, kube, kube_conn, deferrable=False)
    op.start_master = False
    hook = op.hook
    hook.submit_job(op.job, name="polled", labels={"x": "y"}, start=False)
    op._job_name = "polled"
    op.on_kill()
    assert hook.get_job("polled") is None
    assert hook.store.find({"x": "y"}) == []


async def _first(trigger: PrimusJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        payload: dict[str, Any] = event.payload
        return payload
    raise AssertionError("no event")


def test_the_jobs_connections_reach_its_pods_through_a_secret(
    job_world: JobWorld, kube: KubeEnv, kube_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data document naming an Airflow ``kafka`` connection: on Kubernetes the hook resolves it
    and stores it as the job's connections Secret (owned by the job), which the master pod takes
    through ``envFrom``; the password appears in no pod spec."""
    password = "never-in-a-pod-spec"
    extra = {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "trainer",
        "sasl.password": password,
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_KAFKA", json.dumps({"conn_type": "kafka", "extra": extra}))
    data = yaml.safe_load(job_world.data_path.read_text())
    stream = {"name": "events", "type": "kafka", "connection": "lake_kafka", "topic": "clicks"}
    stream |= {"event_time_field": "ts", "start": {"policy": "earliest"}, "schema": SCHEMA}
    data["spec"]["sources"].append(stream)
    job_world.data_path.write_text(yaml.safe_dump(data))
    spec = {"backend": {"type": "kubernetes", "kubernetes": {"namespace": kube.namespace}}}
    path = job_world.job("streamed", **spec)
    doc = yaml.safe_load(path.read_text())
    del doc["spec"]["training"]  # the embedded defaults: mixed training of the history and the stream
    path.write_text(yaml.safe_dump(doc))
    hook = PrimusHook(backend="kubernetes", namespace=kube.namespace, kubernetes_conn_id=kube_conn)
    hook.submit_job(path, start=False)
    hook.start_master("streamed")

    secrets = resource_path("v1", "secrets", kube.namespace)
    secret = kube.api().get(f"{secrets}/streamed-connections")
    assert [r["name"] for r in secret["metadata"]["ownerReferences"]] == ["streamed"]
    (key,) = secret["data"]
    assert key == connection_env_name("lake_kafka")
    assert json.loads(base64.b64decode(secret["data"][key])) == extra
    pod = kube.api().get(resource_path("v1", "pods", kube.namespace, "streamed-master"))
    (container,) = pod["spec"]["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "streamed-connections", "optional": True}}]
    assert password not in json.dumps(pod)
