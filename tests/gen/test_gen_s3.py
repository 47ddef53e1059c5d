"""``primus gen --out s3://…`` writes the history to the real S3 server and a spec that plans it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.contracts import load_data_spec, validate_data_spec
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.embedded.s3 import S3State
from tests.gen.test_clicklog import SMALL_ARGS
from tests.s3_helpers import admin_fs, new_bucket

pytestmark = pytest.mark.s3


def test_gen_writes_the_history_to_the_store(
    s3_server: S3State, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    root = new_bucket(s3_server)
    args = ["gen", "--out", f"s3://{root}/log", "--endpoint", s3_server.endpoint, "--spec-dir", str(tmp_path)]
    assert main([*args, *SMALL_ARGS, "--start", "2026-03-01"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["history_files"] == 2
    fs = admin_fs(s3_server)
    assert fs.get_file_info(f"{root}/log/history/2026-03-02/_SUCCESS").type.name == "File"
    spec_text = (tmp_path / "primus-data.yaml").read_text()
    assert s3_server.secret_key not in spec_text and s3_server.access_key not in spec_text
    spec = load_data_spec(tmp_path / "primus-data.yaml")
    history = spec.spec.source("history")
    assert history.uri == f"s3://{root}/log/history"
    assert history.storage is not None and history.storage.endpoint == s3_server.endpoint
    # Plan the history alone (no broker here): the document minus its Kafka source.
    doc = yaml.safe_load(spec_text)
    doc["spec"]["sources"] = [s for s in doc["spec"]["sources"] if s["type"] == "files"]
    doc["spec"]["mixture"] = [{"source": "history", "weight": 1.0}]
    graph = plan(validate_data_spec(doc), datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC))
    assert graph.stats["history"].rows == summary["history_rows"]
