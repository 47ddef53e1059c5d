"""Broker outages and kills during a mixed follow-mode job, on a real broker stopped and started
again on the same port: no trainer crash, history trains on while the stream is away, and what the
model trained equals what was planned and produced, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_primus.bench.faults import HANG_TIMEOUT_S, Trial, run_trial
from airflow_provider_primus.cli.main import main

HEARTBEAT_S = 1.0  # a data executor's heartbeat interval (data/service/executor.py): its last sign of life

pytestmark = pytest.mark.timeout(420)


@pytest.mark.parametrize(
    ("outage_s", "pause"), [(3.0, False), (15.0, False), (8.0, True)], ids=["stop-3s", "stop-15s", "pause-8s"]
)
def test_a_broker_outage_loses_nothing_and_history_trains_through_it(
    tmp_path: Path, outage_s: float, pause: bool
) -> None:
    result = run_trial(Trial(seed=11, outage_s=outage_s, pause=pause), tmp_path)
    assert result.rows_trained == result.history_rows + result.stream_rows
    assert (result.rows_lost, result.rows_duplicated, result.trainer_crashes) == (0, 0, 0)
    # The outage began with history left to train, and history went on while the broker was away.
    assert result.history_left_at_outage > 0 and result.history_rows_during_outage > 0
    assert result.stream_events[:2] == ["StreamUnavailable", "StreamRecovered"]
    assert result.recovery_s is not None


def test_a_hung_only_data_executor_is_replaced_and_loses_nothing(tmp_path: Path) -> None:
    result = run_trial(Trial(seed=5, hang=True), tmp_path)
    assert result.rows_trained == result.history_rows + result.stream_rows
    assert (result.rows_lost, result.rows_duplicated, result.trainer_crashes) == (0, 0, 0)
    # Stopped with history left; declared hung no sooner than its timeout after its last sign of life
    # (a heartbeat each second, so up to one second before the SIGSTOP), and history trained again.
    assert result.history_left_at_hang > 0
    assert result.hang_detected_s is not None and result.hang_detected_s >= HANG_TIMEOUT_S - HEARTBEAT_S
    assert result.recovery_s is not None


def test_bench_faults_prints_one_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "faults", "--trials", "1", "--seed", "3", "--min-outage-s", "2", "--max-outage-s", "2"]
    assert main([*args, "--workdir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert (
        result["trials"] == 1 and result["outages_s"] == [2.0] and result["kills"][0] in ("trainer", "data")
    )
    assert (result["rows_lost"], result["rows_duplicated"], result["trainer_crashes"]) == (0, 0, 0)
    assert result["recovery_s"] is not None
    changed = result["file_changed"]
    assert changed["tasks_quarantined"] == 1 and changed["rows_unplanned"] == 0
    assert "changed after planning" in changed["reasons"][0]
    hung = result["hung_executor"]
    assert (hung["rows_lost"], hung["rows_duplicated"], hung["trainer_crashes"]) == (0, 0, 0)
    assert hung["recovery_s"] is not None and hung["hang_detected_s"] >= hung["hang_timeout_s"] - HEARTBEAT_S


def test_bench_faults_refuses_an_inverted_outage_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "faults", "--min-outage-s", "5", "--max-outage-s", "1"]) == 2
    assert "--min-outage-s" in capsys.readouterr().err


def test_a_planned_file_rewritten_while_the_job_runs_is_quarantined_and_nothing_unplanned_trains(
    tmp_path: Path,
) -> None:
    """The last history day rewritten in place after planning (same schema and row count, new sample
    ids): its task is quarantined with the reason, none of its new rows is trained, and every other
    planned and produced row is trained once."""
    result = run_trial(Trial(seed=5, change_file=True), tmp_path)
    assert result.file_changed is not None and result.phase == "Stopped"  # a follow job, stopped by the trial
    assert result.tasks_quarantined == 1 and result.rows_quarantined == result.trial.rows_per_day
    [reason] = result.quarantine_reasons
    assert (
        "FileChangedError" in reason and "changed after planning" in reason and result.file_changed in reason
    )
    assert (result.rows_unplanned, result.rows_lost, result.rows_duplicated, result.trainer_crashes) == (
        0,
        0,
        0,
        0,
    )
    assert result.rows_trained == result.history_rows - result.rows_quarantined + result.stream_rows
