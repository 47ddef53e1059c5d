"""The autoscaler on YARN: the job of ``primus bench autoscale`` (one data executor decoding gzipped
JSON logs for a trainer that waits on it), on the mini cluster. The scale-out decision asks the
ApplicationMaster for a container, and the executor in it serves rows (as its heartbeats tell the
dispatcher)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.bench.autoscale import documents, write_logs
from airflow_provider_primus.embedded.yarn import MiniYarnCluster
from airflow_provider_primus.master.jobs import submit, wait_for
from airflow_provider_primus.master.store import SqliteJobStore
from airflow_provider_primus.yarn.backend import YarnBackend
from airflow_provider_primus.yarn.submission import backend_factory
from tests.master.conftest import JobWorld
from tests.master.test_master import ended
from tests.master.test_master import running as master_running

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]

# Long enough that tasks are left for the new executor when it starts (the decision comes 10-12 s
# into the pass, the new executor serves 3-5 s later, the pass lasts about 30 s): 160 files (tasks)
# of 15,000 rows, 4 distinct and the rest copies, about 300 MB.
ROWS, FILES = 2_400_000, 160


def test_a_starved_trainer_scales_the_data_executors_out_in_new_containers(
    tmp_path: Path,
    yarn_cluster: MiniYarnCluster,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn_cluster.conf_dir))
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    rows = write_logs(tmp_path / "logs", ROWS, FILES)
    request.addfinalizer(lambda: shutil.rmtree(tmp_path / "logs", ignore_errors=True))  # 300 MB
    # A long cooldown: no scale-in of the new executor before it served.
    job_path = documents(tmp_path, FILES, scaling=True, window_s=3.0, cooldown_s=60.0)
    job = yaml.safe_load(job_path.read_text())
    job["spec"]["backend"] = {"type": "yarn", "yarn": {"am_memory": "256Mi"}}
    job["spec"]["roles"]["data"]["replicas"]["max"] = 2  # what one 4-vcore NodeManager has room for
    job["spec"]["roles"]["trainer"]["resources"]["memory"] = "1Gi"
    job_path.write_text(yaml.safe_dump(job))
    store = SqliteJobStore(home / "jobs.sqlite")
    submit(job_path, store=store, home=home)

    world = JobWorld(tmp_path, rows, tmp_path / "data.yaml", tmp_path / "training.yaml", store, home)
    factory = backend_factory(launch_wait_s=90.0)
    with master_running(world, "bench-on", join_s=90.0, backend_factory=factory) as master:
        assert isinstance(master.backend, YarnBackend)

        def scaled_out() -> bool:
            return any(
                e.type == "ScaleDecision"
                and e.data.get("action") == "scale_out"
                and e.data.get("role") == "data"
                for e in store.events("bench-on")
            )

        served: list[int] = []

        def data_1_serves() -> bool:
            """Rows data-1 has served, as its heartbeats tell the dispatcher (noted while it runs: an
            ended executor's figures are gone with it)."""
            executor = master.dispatcher.status()["executors"].get("data-1.0") or {}
            rows = (executor.get("metrics") or {}).get("rows")
            if rows:
                served.append(int(rows))
            return bool(served)

        record = wait_for(store, "bench-on", lambda r: scaled_out() or ended(r), 300)
        assert scaled_out(), f"the job ended ({record.status.get('phase')}) with no scale-out decision"
        deadline = time.monotonic() + 300
        while not data_1_serves() and not ended(store.get("bench-on")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the dispatcher's figures, not the job record, change: poll them
        assert served, "data-1 served no row before the job ended"
        record = store.get("bench-on")
        new = record.status["executors"]["data-1"]["handle"]["ref"]
        first = record.status["executors"]["data-0"]["handle"]["ref"]
        assert new["container"].startswith("container_") and new["container"] != first["container"]
        assert new["application"] == first["application"] == master.backend.session.app_id
        record = wait_for(store, "bench-on", ended, 300)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert record.status["progress"]["acked_rows"] == rows
