"""The autoscaler on YARN: the job of ``primus bench autoscale`` (one data executor decoding gzipped
JSON logs for a trainer that waits on it), on the mini cluster. The scale-out decision asks the
ApplicationMaster for a container, and the executor in it serves rows."""

from __future__ import annotations

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

# Long enough that a new executor still finds tasks: 16 files of 60,000 rows (4 distinct, the rest copies).
ROWS, FILES = 960_000, 16


def test_a_starved_trainer_scales_the_data_executors_out_in_new_containers(
    tmp_path: Path, yarn_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(yarn_cluster.conf_dir))
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    rows = write_logs(tmp_path / "logs", ROWS, FILES)
    job_path = documents(tmp_path, FILES, scaling=True, window_s=3.0, cooldown_s=3.0)
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

        def data_1_serves() -> bool:
            return any(s.executor == "data-1" and s.rows > 0 for s in list(master.telemetry.samples))

        record = wait_for(store, "bench-on", lambda r: data_1_serves() or ended(r), 400)
        assert data_1_serves(), f"data-1 served no row before the job ended ({record.status.get('phase')})"
        decisions = [e.data for e in store.events("bench-on") if e.type == "ScaleDecision"]
        assert any(d["action"] == "scale_out" and d["role"] == "data" for d in decisions), decisions
        new = record.status["executors"]["data-1"]["handle"]["ref"]
        first = record.status["executors"]["data-0"]["handle"]["ref"]
        assert new["container"].startswith("container_") and new["container"] != first["container"]
        assert new["application"] == first["application"] == master.backend.session.app_id
        record = wait_for(store, "bench-on", ended, 300)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert record.status["progress"]["acked_rows"] == rows
