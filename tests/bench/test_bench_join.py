"""``primus bench join`` on a small table: the figures it names, side by side, from one run."""

from __future__ import annotations

import json

import pytest

from airflow_provider_primus.cli.main import main


def test_bench_join_prints_both_speeds_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["bench", "join", "--rows", "20000", "--feature-rows", "5000", "--keys", "500", "--repeats", "1"]
    )
    assert code == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    result = json.loads(line)
    assert {"join_rows_s", "plain_rows_s", "join_cost_ratio", "index_build_s"} <= result.keys()
    assert (result["rows"], result["feature_rows"], result["keys"]) == (20000, 5000, 500)
    # The ratio is of the two passes' times, the speeds of the same passes: they agree.
    assert result["join_cost_ratio"] == pytest.approx(
        result["plain_rows_s"] / result["join_rows_s"], rel=0.01
    )
