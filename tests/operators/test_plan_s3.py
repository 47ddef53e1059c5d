"""``PrimusPlanDataOperator`` on an ``s3://`` source whose credentials are an Airflow ``aws``
connection: resolved in the task, handed to the planner in memory, found in no XCom, graph or log."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.operators.plan import PrimusPlanDataOperator
from tests.data.conftest import T0, table
from tests.s3_helpers import admin_fs, aws_connection, new_bucket

pytestmark = pytest.mark.s3


def test_plan_operator_resolves_an_aws_connection_and_never_shows_its_secret(
    s3_server: S3State, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = new_bucket(s3_server)
    with admin_fs(s3_server).open_output_stream(f"{root}/clicks/{T0:%Y-%m-%d}/part-0.parquet") as out:
        pq.write_table(table(500), out)
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", aws_connection(s3_server))
    doc: dict[str, Any] = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "lake"},
        "spec": {
            "sources": [
                {
                    "name": "clicks",
                    "type": "files",
                    "format": "parquet",
                    "uri": f"s3://{root}/clicks",
                    "path_template": "{date}",
                    "granularity": "day",
                    "storage": {"credentials": {"connection": "lake_s3"}},  # endpoint from the connection
                    "schema": {"sparse": ["user_id"], "dense": ["price"], "label": {"rule": "rating >= 4"}},
                }
            ]
        },
    }
    spec_path = tmp_path / "data.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    caplog.set_level("DEBUG")
    op = PrimusPlanDataOperator(
        task_id="plan",
        spec_path=str(spec_path),
        start=T0.isoformat(),
        end=(T0 + timedelta(days=1)).isoformat(),
        cache_dir=str(tmp_path / "home"),
    )
    summary = op.execute({"run_id": "manual__1"})
    assert summary["rows"] == 500
    secret = s3_server.secret_key
    assert secret not in json.dumps(summary)
    assert secret.encode() not in Path(summary["graph"]).read_bytes()
    assert secret not in caplog.text
    assert all(secret.encode() not in p.read_bytes() for p in (tmp_path / "home").rglob("*") if p.is_file())
