"""The data-parallel scaling benchmark runs end to end on a tiny size (figures are not asserted: not
a timed test; its keys and counts are)."""

import json
from pathlib import Path

import pytest

from airflow_provider_primus.cli.main import main


def test_bench_train_scale_prints_one_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ["--rows", "6000", "--batch-size", "256", "--table-rows", "20000"]
    code = main(["bench", "train-scale", *sizes, "--workdir", str(tmp_path), "--json"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[-1])
    assert {"rows_per_s_1", "rows_per_s_2", "comm_share_2"} <= set(result)
    assert result["rows_per_s_1"] > 0 and result["rows_per_s_2"] > 0
    assert 0 < result["comm_share_2"] < 1
    assert result["peak_rss_row_wise_mb"] > 0 and result["peak_rss_replicated_mb"] > 0
    # 6000 rows: 24 steps of 256 alone (the last one short), 12 steps of 2 x 256 together.
    assert (result["steps_1"], result["steps_2"]) == (24 - 6, 12 - 6)
