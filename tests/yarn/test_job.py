"""A Primus job on the YARN mini cluster: its executors are containers of the job's application.

Exact delivery through a killed container, an in-place resize (the NodeManager's view of the
container changes, its id does not) and a restarted ApplicationMaster that re-adopts the containers.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psutil
import pyarrow.fs as pafs
import pytest
import yaml

from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.embedded.kafka import BrokerState
from airflow_provider_primus.embedded.yarn import MiniYarnCluster
from airflow_provider_primus.hadoop.webhdfs import WebHdfs, WebHdfsError
from airflow_provider_primus.master.jobs import submit, wait_for
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord
from airflow_provider_primus.yarn.am import AmClient, AmError
from airflow_provider_primus.yarn.backend import YarnBackend
from airflow_provider_primus.yarn.rest import ResourceManager, node_containers
from airflow_provider_primus.yarn.submission import backend_factory
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended, executor
from tests.master.test_master import running as master_running
from tests.training.conftest import T0, events, to_json

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]

STREAM_ROWS = 1500

YARN_JOB: dict[str, Any] = {
    "backend": {"type": "yarn", "yarn": {"am_memory": "256Mi"}},
    # Small batches and a small read-ahead, so executors hold little when they are killed.
    "data_service": {"batch_rows": 500, "window": 2},
    "roles": {
        "data": {"resources": {"cpu": 1, "memory": "256Mi"}, "failover": {"max_restarts": 2}},
        "trainer": {"resources": {"cpu": 1, "memory": "1Gi"}},
    },
}


def running(world: JobWorld) -> AbstractContextManager[Master]:
    """The master tests' running master, on YARN (containers take longer to come and go)."""
    return master_running(world, join_s=90.0, backend_factory=backend_factory(launch_wait_s=90.0))


def until(world: JobWorld, predicate: Callable[[JobRecord], bool], timeout_s: float = 240) -> JobRecord:
    return wait_for(world.store, "job", predicate, timeout_s)


def serving(record: JobRecord) -> bool:
    """Both executors run in containers and the trainer has trained: mid-pass, for certain."""
    ex = record.status.get("executors") or {}
    started = (record.status.get("progress") or {}).get("trainer_step") or 0
    return started > 0 and all(e["handle"]["ref"].get("container") for e in ex.values())


def container_process(container: str) -> psutil.Process:
    """The executor process YARN runs in ``container`` (the NodeManager exports CONTAINER_ID)."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "airflow_provider_primus.cli.main" in (proc.info["cmdline"] or []) and (
                proc.environ().get("CONTAINER_ID") == container
            ):
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no executor process runs in {container}")


def nm_view(record: JobRecord, name: str) -> dict[str, Any]:
    ref = executor(record, name)["handle"]["ref"]
    [found] = [c for c in node_containers(ref["node_http"], getpass.getuser()) if c["id"] == ref["container"]]
    return found


def _resize_refuse_and_kill(
    yarn_world: JobWorld, master: Master, before: JobRecord, data: dict[str, Any]
) -> None:
    """data-0 resized in place, a resize above the node refused, the AM's API refusing a wrong
    token, then data-0's container killed and its executor restarted in a new one."""
    assert nm_view(before, "data-0")["totalMemoryNeededMB"] == 256
    # Servers in a container bind and advertise their node's address (NM_HOST, expanded by the
    # NodeManager: the host the node is known by), as pods do their pod IP.
    node_host = data["node"].rsplit(":", 1)[0]
    assert container_process(data["container"]).environ()["PRIMUS_ADVERTISE_HOST"] == node_host

    # In place: the NodeManager reports the new size, the container is the same.
    master.request({"resize": {"data-0": {"cpu": 2, "memory": 512 * 2**20}}})
    resized = until(yarn_world, lambda r: executor(r, "data-0")["handle"]["allotment"]["cpu"] == 2)
    view = nm_view(resized, "data-0")
    assert (view["totalMemoryNeededMB"], view["totalVCoresNeeded"]) == (512, 2)
    assert executor(resized, "data-0")["handle"]["ref"]["container"] == data["container"]
    assert executor(resized, "data-0")["incarnation"] == 0

    # Above what a node offers: refused at once, an event says so, the allotment is kept.
    master.request({"resize": {"data-0": {"memory": 64 * 2**30}}})
    until(yarn_world, lambda r: "ResizeRefused" in [e.type for e in yarn_world.store.events("job")])
    assert executor(until(yarn_world, serving), "data-0")["handle"]["allotment"]["memory"] == 512 * 2**20

    # The ApplicationMaster's API answers the job token only.
    am_url = master.backend.session.rm.app(data["application"])["amRPCAddress"]
    with pytest.raises(AmError) as refused:
        AmClient(f"http://{am_url}", "not-the-token").status()
    assert refused.value.status == 401

    # A container killed mid-pass: the executor is restarted in a new container, its leases
    # re-dispatched, and no row is lost or trained twice.
    container_process(data["container"]).send_signal(signal.SIGKILL)
    after = until(yarn_world, lambda r: executor(r, "data-0")["incarnation"] == 1)
    assert executor(after, "data-0")["handle"]["ref"]["container"] != data["container"]


def test_job_trains_exactly_once_through_a_resize_and_a_killed_container(
    yarn_world: JobWorld, yarn_cluster: MiniYarnCluster
) -> None:
    submit(yarn_world.job(**YARN_JOB), store=yarn_world.store)
    with running(yarn_world) as master:
        assert isinstance(master.backend, YarnBackend)
        before = until(yarn_world, serving)
        data = executor(before, "data-0")["handle"]["ref"]
        assert (
            data["container"].startswith("container_")
            and data["application"] == master.backend.session.app_id
        )
        # The trainer held still (SIGSTOP) until data-0's successor runs: YARN does not throttle a
        # container's CPU, and on a quiet machine the pass could end before the kill below.
        trainer = container_process(executor(before, "trainer-0")["handle"]["ref"]["container"])
        trainer.suspend()
        try:
            _resize_refuse_and_kill(yarn_world, master, before, data)
        finally:
            trainer.resume()
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert executor(record, "data-0")["restarts"] == 1
    types = [e.type for e in yarn_world.store.events("job")]
    assert "ExecutorFailed" in types and "Resized" in types
    assert_exactly_once(yarn_world)
    # The job's end finished its application.
    rm = ResourceManager(yarn_cluster.rm_url, getpass.getuser())
    deadline = time.monotonic() + 60
    while rm.app(data["application"])["state"] != "FINISHED" and time.monotonic() < deadline:
        time.sleep(0.2)  # the ApplicationMaster unregisters as the master closes
    app = rm.app(data["application"])
    rm.close()
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    # ... and removed its staged files (the token among them) from HDFS.
    assert yarn_cluster.webhdfs_url is not None
    staged = WebHdfs(yarn_cluster.webhdfs_url, getpass.getuser())
    with pytest.raises(WebHdfsError, match=r"HTTP 404"):
        staged.status(f"/user/{getpass.getuser()}/.primus/{data['application']}")
    staged.close()


def test_a_restarted_application_master_re_adopts_the_containers(yarn_world: JobWorld) -> None:
    submit(yarn_world.job(**YARN_JOB), store=yarn_world.store)
    with running(yarn_world) as master:
        backend = master.backend
        assert isinstance(backend, YarnBackend)
        before = until(yarn_world, serving)
        containers = {n: e["handle"]["ref"]["container"] for n, e in before.status["executors"].items()}
        first_attempt = backend.attempt
        am_pid = int(backend._call(lambda am: am.status())["pid"])
        os.kill(am_pid, signal.SIGKILL)  # the ApplicationMaster's JVM dies; YARN starts attempt 2
        record = until(yarn_world, ended)
        assert backend.attempt != first_attempt
    assert record.status["phase"] == "Succeeded", record.status["message"]
    # The same containers finished the job: none was relaunched.
    assert {n: e["handle"]["ref"]["container"] for n, e in record.status["executors"].items()} == containers
    assert all(e["incarnation"] == 0 for e in record.status["executors"].values())
    types = [e.type for e in yarn_world.store.events("job")]
    assert types.count("ExecutorAdopted") == len(containers)
    assert "ApplicationMasterRestarted" in types
    assert_exactly_once(yarn_world)


@pytest.mark.kafka
def test_a_window_on_hdfs_mixed_with_a_kafka_topic_trains_exactly_once(
    yarn_world: JobWorld,
    yarn_cluster: MiniYarnCluster,
    kafka_broker: BrokerState,
    new_topic: Callable[..., str],
) -> None:
    """The same hourly Parquet history, copied to the mini cluster's HDFS, mixed with a Kafka topic:
    the master plans the window there, the data executors in their containers read it there (WebHDFS:
    no libhdfs here) and the trainer in its container consumes the topic. Every row of both, once."""
    fs, root = open_filesystem(f"{yarn_cluster.fs_default}/primus-tests/{uuid.uuid4().hex}")
    pafs.copy_files(str(yarn_world.root / "store"), f"{root}/store", destination_filesystem=fs)
    shutil.rmtree(yarn_world.root / "store")  # nothing is read from the local copy
    topic = new_topic("yarn-mixed")
    produce(kafka_broker.bootstrap_servers, topic, to_json(events(yarn_world.rows, STREAM_ROWS, T0, seed=7)))
    data = yarn_world.add_stream(kafka_broker.bootstrap_servers, topic, (0.7, 0.3), priority=1)
    data["spec"]["sources"][0]["uri"] = f"{yarn_cluster.fs_default}{root}/store"
    yarn_world.data_path.write_text(yaml.safe_dump(data))
    yarn = {"am_memory": "256Mi", "conf_dir": str(yarn_cluster.conf_dir)}
    submit(yarn_world.job(**{**YARN_JOB, "backend": {"type": "yarn", "yarn": yarn}}), store=yarn_world.store)
    with running(yarn_world):
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    rows = yarn_world.trace_rows()
    planned = yarn_world.rows + STREAM_ROWS
    assert len(rows) == planned, f"{len(rows)} rows trained, {planned} planned"
    assert sorted(rows) == list(range(planned))
