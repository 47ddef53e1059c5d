"""A job submitted from Airflow whose history is on the object store behind an ``aws`` connection:
the hook resolves the connection where Airflow is and hands it to the job's processes by environment;
the job trains every row, and the secret appears in no status, event or log of the job."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.master.jobs import wait_for
from airflow_provider_primus.paths import primus_home
from tests.s3_helpers import admin_fs, aws_connection, new_bucket
from tests.training.conftest import T0, events, history_source

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]


def test_a_dags_job_reads_the_object_store_with_its_connection_and_never_shows_the_secret(
    s3_server: S3State, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, hours, per_hour = new_bucket(s3_server), 2, 1500
    fs = admin_fs(s3_server)
    for h in range(hours):
        t = T0 + timedelta(hours=h)
        with fs.open_output_stream(f"{root}/store/{t:%Y-%m-%d}/{t:%H}/part-0.parquet") as out:
            pq.write_table(events(h * per_hour, per_hour, t, seed=h), out, row_group_size=500)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", aws_connection(s3_server))
    data: dict[str, Any] = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "lake"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()},
            "sources": [
                history_source(
                    tmp_path, uri=f"s3://{root}/store", storage={"credentials": {"connection": "lake_s3"}}
                )
            ],
        },
    }
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {"mode": "batch", "batch_size": 100, "mixing": {"shuffle": {"buffer_rows": 0}}},
    }
    job = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": "lake-job"},
        "spec": {
            "data": "data.yaml",
            "training": "training.yaml",
            "scaling": {"enabled": False},
            "roles": {
                "data": {"resources": {"cpu": 1, "memory": "1Gi"}},
                "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
            },
        },
    }
    for name, doc in (("data.yaml", data), ("training.yaml", training), ("job.yaml", job)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))

    hook = PrimusHook()
    hook.submit_job(tmp_path / "job.yaml")
    record = wait_for(hook.store, "lake-job", lambda r: r.status.get("phase") in TERMINAL, 240)
    assert record.status["phase"] == "Succeeded", record.status.get("message")
    assert record.status["progress"]["acked_rows"] == hours * per_hour

    secret = s3_server.secret_key
    assert secret not in json.dumps(record.status)
    assert secret not in json.dumps([e.to_dict() for e in hook.store.events("lake-job")])
    files = [p for p in (primus_home() / "jobs" / "lake-job").rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    assert all(secret.encode() not in p.read_bytes() for p in files)
