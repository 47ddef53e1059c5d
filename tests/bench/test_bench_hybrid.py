"""The hybrid benchmark runs end to end on a tiny world against the session's real broker (figures are
not asserted: not a timed test; the counts are)."""

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.bench import hybrid
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
    for key in ("mixing_overhead_ratio", "end_to_end_ratio", "ingest_ratio", "avro_ingest_ratio"):
        assert result[key] > 0
    for key in (
        "json_ingest_rows_s",
        "avro_ingest_rows_s",
        "avro_bare_consumer_rows_s",
        "avro_decode_only_rows_s",
    ):
        assert isinstance(result[key], int) and result[key] > 0, key
    assert result["json_ingest_rows_s"] == result["ingest_rows_s"]
    assert set(result["freshness_p99_s"]) == {"stream", "mixed"}
    _check_side_by_side(result)


def _check_side_by_side(result: dict[str, Any]) -> None:
    """The defaults and the old log: the same data trained the same rows, a result per mode, the
    clock each variant ended on, and target flags that agree with the AUCs they are computed from."""
    both = {"history": 6000, "events": 3000}
    assert result["defaults_rows_trained"] == {
        "batch": {"history": 6000},
        "stream": {"events": 3000},
        "mixed": both,
    }
    assert result["old_log_rows_trained"] == {"batch": {"history": 6000}, "mixed": both}
    # The stationary world (no item lifecycle) beside the default one, with the same rows trained.
    assert result["item_lifecycle"] is True
    assert result["stationary_world_rows_trained"] == result["defaults_rows_trained"]
    for mode in ("mixed", "batch", "stream"):
        assert 0.0 < result[f"stationary_world_{mode}_auc"] < 1.0, mode
        assert result["stationary_world_logloss"][mode] > 0, mode
    for key in (
        "defaults_mixed_auc",
        "defaults_batch_auc",
        "defaults_stream_auc",
        "old_log_mixed_auc",
        "old_log_batch_auc",
    ):
        assert 0.0 < result[key] < 1.0, key
    # The embedded defaults choose the clock; the old log is six years behind the wall clock, so it is
    # replayed to the end and never switches.
    assert result["defaults_clock"]["setting"] == "auto" and result["old_log_clock"]["setting"] == "auto"
    assert result["old_log_clock"] == {"setting": "auto", "in_force": "replay", "switched": None}
    # Live: the last of the 3 days is today (yesterday, should the test have run past midnight).
    live = date.fromisoformat(result["live_start"])
    today = datetime.now(UTC).date()
    assert live + timedelta(days=2) in (today, today - timedelta(days=1))
    assert (live - date.fromisoformat(result["old_log_start"])).days == hybrid.OLD_LOG_DAYS
    assert 0 < result["stream_end_ahead_s"] <= 86_400
    margin = result["target_margin"]

    def beats(better: str, worse: str) -> bool:
        return bool(round(result[better] - result[worse], 6) >= margin)

    expected = {
        "defaults_mixed_beats_batch": beats("defaults_mixed_auc", "defaults_batch_auc"),
        "defaults_mixed_beats_stream": beats("defaults_mixed_auc", "defaults_stream_auc"),
        "old_log_mixed_beats_batch": beats("old_log_mixed_auc", "old_log_batch_auc"),
    }
    assert {k: result[k] for k in expected} == expected
    assert result["targets_met"] == all(expected.values())
    # The item click-rate reference (bench/item_ctr.py) on both worlds: two AUCs and their difference.
    for prefix in ("", "stationary_world_"):
        ref = result[f"{prefix}item_ctr_reference_auc"]
        assert set(ref) == {"history", "history_and_stream"} and all(0.0 < v < 1.0 for v in ref.values())
        gain = round(ref["history_and_stream"] - ref["history"], 6)
        assert result[f"{prefix}item_ctr_fresh_gain"] == gain
    for other in ("batch", "stream"):  # reported beside the targets, not part of them
        key = f"stationary_world_mixed_beats_{other}"
        assert result[key] == beats("stationary_world_mixed_auc", f"stationary_world_{other}_auc"), key
