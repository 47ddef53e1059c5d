"""The Airflow side of a YARN job: the hook submits it with ``backend="yarn"`` (the connection's
ResourceManager settings fill the document), a master started again after its worker died reattaches
to the application by its tags, and cancelling kills the application even with no master left."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import psutil
import pytest

from airflow_provider_primus.embedded.yarn import MiniYarnCluster
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.master.store import JobRecord
from airflow_provider_primus.plugins.views import job_page
from airflow_provider_primus.yarn.application import application_tag
from airflow_provider_primus.yarn.rest import ResourceManager
from tests.master.conftest import JobWorld
from tests.yarn.test_job import until

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]

ROLES: dict[str, Any] = {
    "data_service": {"batch_rows": 200, "window": 1},
    "roles": {
        "data": {"resources": {"cpu": 1, "memory": "256Mi"}},
        "trainer": {"resources": {"cpu": 1, "memory": "1Gi"}},
    },
}


def containers(record: JobRecord) -> dict[str, str]:
    return {
        n: e["handle"]["ref"].get("container", "") for n, e in (record.status.get("executors") or {}).items()
    }


def kill_master(record: JobRecord) -> None:
    pid = int(record.status["master"]["pid"])
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(pid)], timeout=10) if psutil.pid_exists(pid) else None


def test_hook_reattaches_by_application_tag_and_cancel_kills_the_application(
    yarn_world: JobWorld, yarn_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm = ResourceManager(yarn_cluster.rm_url, "primus-test")
    extra = {"backend": "yarn", "queue": "default", "hadoop_conf_dir": str(yarn_cluster.conf_dir)}
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps({"conn_type": "primus", "extra": extra}))
    hook = PrimusHook("primus_yarn", retries=1, backoff_s=0.1, timeout_s=5)
    path = yarn_world.job(**ROLES)
    hook.submit_job(path, name="job")
    record = until(yarn_world, lambda r: len([c for c in containers(r).values() if c]) == 2)
    stored = record.spec["spec"]["backend"]
    assert stored["type"] == "yarn"  # the connection's settings filled the document's silence
    assert (stored["yarn"]["queue"], stored["yarn"]["conf_dir"]) == ("default", str(yarn_cluster.conf_dir))
    [app] = rm.apps(tag=application_tag("job"), states=("RUNNING",))
    first = containers(record)
    # The job page names each executor's YARN container (the plugin renders the stored status).
    page = job_page(record, [], [], base="/primus", now=time.time())
    assert all(f">{container}<" in page for container in first.values()), first

    # The worker (and the master with it) dies; the retry starts a master that finds the application.
    kill_master(record)
    hook.start_master("job")
    record = until(
        yarn_world,
        lambda r: (
            r.status["master"]["pid"] != record.status["master"]["pid"]
            and "ExecutorAdopted" in [e.type for e in yarn_world.store.events("job")]
        ),
    )
    assert containers(record) == first
    assert [a["id"] for a in rm.apps(tag=application_tag("job"), states=("RUNNING",))] == [app["id"]]

    # Cancelled while no master runs: the application is killed, its containers with it.
    kill_master(record)
    hook.cancel_job("job")
    deadline = time.monotonic() + 60
    while rm.app(app["id"])["state"] != "KILLED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rm.app(app["id"])["state"] == "KILLED"
    assert yarn_world.store.get("job").desired.get("stop") is True
    rm.close()
