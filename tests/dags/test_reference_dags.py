"""The reference DAGs for real: the streaming trainer DAG runs under ``airflow dags test`` in its own
process (its task defers for the job's whole life), and the daily DAG runs three days with
``dag.test()`` against it — each window consumed exactly once by the single job, a re-run of a day
a no-op, and stopping the job ends the trainer's task successfully."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.master.jobs import wait_for
from airflow_provider_primus.master.store import SqliteJobStore
from tests.conftest import REPO, venv_bin
from tests.master.conftest import write_world
from tests.training.conftest import T0, history_source

pytestmark = pytest.mark.timeout(600)
DAYS, HOURS, ROWS = 3, 24, 50


@pytest.fixture
def daily_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    write_world(tmp_path, hours=DAYS * HOURS, per_file=ROWS, success_marker=True)
    source = history_source(tmp_path, success_marker="_SUCCESS")
    data = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusData", "metadata": {"name": "history"}}
    data["spec"] = {"sources": [source]}
    training = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusTraining", "metadata": {"name": "t"}}
    training["spec"] = {"mode": "batch", "batch_size": 100, "checkpoint": {"every_steps": 20, "every_s": 0.0}}
    job = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "metadata": {"name": "ctr-stream"}}
    job["spec"] = {
        "data": "data.yaml",
        "training": "training.yaml",
        "follow": True,
        "passthrough": ["row_id"],
        "scaling": {"enabled": False},
    }
    for name, doc in (("data.yaml", data), ("training.yaml", training), ("job.yaml", job)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    return {"root": tmp_path, "home": home, "store": SqliteJobStore(home / "jobs.sqlite")}


def trained_rows(home: Path) -> list[int]:
    steps: dict[int, list[int]] = {}
    for line in (home / "jobs" / "ctr-stream" / "trace.jsonl").read_text().splitlines():
        entry = json.loads(line)
        steps[entry["step"]] = [row[3] for row in entry["rows"]]
    return [r for s in sorted(steps) for r in steps[s]]


def test_daily_windows_join_the_streaming_trainer(daily_world: dict[str, Any], airflow_db: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    root, home, store = daily_world["root"], daily_world["home"], daily_world["store"]
    conf = json.dumps({"job": str(root / "job.yaml")})
    streaming = subprocess.Popen(
        [venv_bin("airflow"), "dags", "test", "primus_streaming_trainer", "-c", conf],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 120
        while not any(r.name == "ctr-stream" for r in store.find()):  # the task submits it
            assert streaming.poll() is None, streaming.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the streaming DAG did not submit its job"
            time.sleep(0.2)
        wait_for(store, "ctr-stream", lambda r: r.status.get("phase") == "Running", timeout_s=120)
        daily = DagBag(dag_folder=str(REPO / "dags")).get_dag("primus_daily_backfill")
        run_conf = {"data": str(root / "data.yaml"), "source": "history", "job": "ctr-stream"}
        for day in range(1, DAYS + 1):  # the run after day d covers day d-1
            run = daily.test(logical_date=T0 + timedelta(days=day), run_conf=run_conf)
            assert run.state == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
        record = store.get("ctr-stream")
        windows = record.status["windows"]
        assert [w["consumed"] for w in windows] == [True] * DAYS
        assert [w["start"] for w in windows] == [(T0 + timedelta(days=d)).isoformat() for d in range(DAYS)]
        assert [w["source"] for w in windows] == ["history"] * DAYS  # the DAG names the source
        # A re-run of a day (a retried task) appends nothing and finds its window consumed.
        again = daily.test(logical_date=T0 + timedelta(days=1), run_conf=run_conf)
        assert again.state == "success"
        assert len(store.get("ctr-stream").status["windows"]) == DAYS
        assert [r.name for r in store.find()] == ["ctr-stream"]  # one job, however often tasks ran
        rows = trained_rows(home)
        assert sorted(rows) == list(range(DAYS * HOURS * ROWS))  # every window's rows, exactly once
        PrimusHook().stop_job("ctr-stream")
        out, _ = streaming.communicate(timeout=180)
        assert streaming.returncode == 0, out[-3000:]
        assert "was stopped" in out
    finally:
        if streaming.poll() is None:
            streaming.kill()
            streaming.wait()
