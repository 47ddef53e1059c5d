"""The autoscaler on YARN: the job of ``primus bench autoscale`` (one data executor decoding gzipped
JSON logs for a trainer that waits on it), on the mini cluster. The scale-out decision asks the
ApplicationMaster for a container, and the executor in it registers and serves rows."""

from __future__ import annotations

import signal
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
from tests.yarn.test_job import container_process

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
    # A long cooldown: no scale-in of the new executor while the test holds the pass.
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

        def data_1_serves() -> bool:
            return any(s.executor == "data-1" and s.rows > 0 for s in list(master.telemetry.samples))

        record = wait_for(store, "bench-on", lambda r: scaled_out() or ended(r), 300)
        assert scaled_out(), f"the job ended ({record.status.get('phase')}) with no scale-out decision"
        # Hold the pass (the trainer paused) until the new executor has registered to serve: a fast
        # machine would otherwise finish the job before it starts, and the test would prove nothing.
        trainer = container_process(record.status["executors"]["trainer-0"]["handle"]["ref"]["container"])
        trainer.send_signal(signal.SIGSTOP)
        try:
            record = wait_for(
                store,
                "bench-on",
                lambda r: any(e.startswith("data-1.") for e in master.dispatcher.executors),
                120,
            )
        finally:
            trainer.send_signal(signal.SIGCONT)
        new = record.status["executors"]["data-1"]["handle"]["ref"]
        first = record.status["executors"]["data-0"]["handle"]["ref"]
        assert new["container"].startswith("container_") and new["container"] != first["container"]
        assert new["application"] == first["application"] == master.backend.session.app_id
        # It leased tasks while the trainer was paused: the job cannot end before it serves them.
        wait_for(store, "bench-on", lambda r: data_1_serves() or ended(r), 300)
        assert data_1_serves(), "data-1 registered but served no row"
        record = wait_for(store, "bench-on", ended, 300)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert record.status["progress"]["acked_rows"] == rows
