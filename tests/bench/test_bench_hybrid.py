"""The hybrid benchmark runs end to end on a tiny world against the session's real broker (figures are
not asserted: not a timed test; the counts are)."""

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.cli.main import main


def test_bench_hybrid_prints_one_json_line(
    tmp_path: Path, kafka_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "hybrid",
            "--history-days",
            "2",
            "--stream-days",
            "1",
            "--rows-per-day",
            "3000",
            "--batch-size",
            "256",
            "--bootstrap-servers",
            kafka_broker.bootstrap_servers,
            "--workdir",
            str(tmp_path),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["history_rows"] == 6000 and result["stream_messages"] == 3000
    assert result["rows_trained"] == {
        "batch": {"history": 6000},
        "stream": {"events": 3000},
        "mixed": {"history": 6000, "events": 3000},
    }
    for mode in ("batch", "stream", "mixed"):
        assert 0.0 < result["auc"][mode] < 1.0
        assert result["logloss"][mode] > 0
    for key in ("mixing_overhead_ratio", "end_to_end_ratio", "ingest_ratio"):
        assert result[key] > 0
    assert set(result["freshness_p99_s"]) == {"stream", "mixed"}
