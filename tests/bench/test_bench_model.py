"""``primus bench model`` end to end on a tiny world against the session's broker: one JSON line with
the fields the issue names, consistent among themselves (timings are not asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.cli.main import main

FIELDS = ("builtin_samples_s", "user_model_samples_s", "user_model_ratio", "dlrm_auc", "dcn_v2_auc",
          "dcn_v2_samples_s", "multi_hot_rows_s", "single_hot_rows_s", "avro_ingest_rows_s",
          "json_ingest_rows_s")  # fmt: skip


def test_bench_model_prints_one_json_line(
    tmp_path: Path, kafka_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["bench", "model", "--history-days", "2", "--rows-per-day", "2000", "--batch-size", "256",
         "--repeats", "1", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--workdir", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert set(FIELDS) <= set(result)
    rows = {"history": 4000, "events": 2000}
    assert result["rows_trained"] == {"dlrm": rows, "dcn_v2": rows, "user": rows}
    for key in ("dlrm_auc", "dcn_v2_auc"):
        assert 0.0 < result[key] < 1.0
    # The user model is the built-in DLRM brought through the protocol, built from the same draws:
    # it trains to the same scores.
    assert result["user_model_auc"] == pytest.approx(result["dlrm_auc"], abs=1e-6)
    assert result["user_model_ratio"] == pytest.approx(
        result["user_model_samples_s"] / result["builtin_samples_s"], rel=0.01
    )
    assert (
        result["json_ingest_rows_s"] > 0
        and result["avro_ingest_rows_s"] > 0
        and result["dcn_v2_samples_s"] > 0
    )
    assert all(result[k] is None for k in result["not_measured"])  # said as such, with the reason
