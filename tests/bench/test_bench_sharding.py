"""The sharding benchmark runs end to end on tiny tables (memory figures are measured, not asserted
beyond their shape: they are the benchmark's output, not a test of the machine)."""

import json

import pytest

from airflow_provider_primus.cli.main import main

KEYS = {"peak_rss_replicated_mb", "peak_rss_row_wise_mb", "tables_mb", "dense_mb", "trainers"}


def test_bench_sharding_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "sharding", "--rows", "2000", "--tables", "2", "--steps", "2", "--json"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result.keys() >= KEYS and result["trainers"] == 2
    # Two tables of 2,000 x 16 float32 with Adagrad's state: weights and sums, 0.49 MiB.
    assert result["tables_mb"] == round(2 * 2000 * 16 * 4 * 2 / 2**20, 2)
    assert result["row_wise_tables_mb_per_trainer"] == round(result["tables_mb"] / 2, 2)
    assert all(result[k] > 0 for k in ("peak_rss_replicated_mb", "peak_rss_row_wise_mb", "dense_mb"))
