"""The planning benchmark runs end to end on a tiny store (figures are not asserted: not a timed test)."""

import json
from pathlib import Path

import pytest

from airflow_provider_primus.bench.plan import bare_pool_s, io_floor_s
from airflow_provider_primus.cli.main import main


def test_bench_plan_prints_one_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "bench",
            "plan",
            "--days",
            "1",
            "--files",
            "2",
            "--delay-ms",
            "1",
            "--local-files",
            "200",
            "--workdir",
            str(tmp_path),
            "--parallel-runs",
            "2",
            "--incremental-runs",
            "3",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    # 1 day x 2 sources x 24 hours; the two small files of a partition are grouped into one task.
    assert result["partitions"] == 48 and result["files"] == 96 and result["tasks"] == 48
    assert result["incremental_tasks"] == 96  # the appended day doubles the graph
    # Serial: per partition one listing (it shows the marker) and one footer per file;
    # incremental: the new day only.
    assert result["serial_calls"] == 48 * 3 and result["incremental_calls"] == 48 * 3
    assert result["local_files"] == 200 and result["local_tasks"] == 200
    assert result["parallel_runs"] == 2 and result["incremental_runs"] == 3
    for key in (
        "serial_s",
        "parallel_s",
        "speedup",
        "incremental_s",
        "incremental_ratio",
        "local_tasks_per_s",
    ):
        assert result[key] > 0
    assert list(tmp_path.iterdir()) == []  # generated stores are cleaned up
    # 3 waves of 1 ms each: 144 round trips on 64 workers, the footers after their listings.
    assert result["parallel_floor_s"] == result["incremental_floor_s"] == 0.003
    # Sleeps on a pool of the same size cannot beat the ideal floor.
    assert result["parallel_pool_s"] >= 0.003 and result["incremental_pool_s"] >= 0.003


def test_io_floor_counts_waves_of_round_trips_and_the_listing_before_the_footers() -> None:
    # The default bench: 20 days x 2 sources x 24 hours, 4 files each, 64 workers, 20 ms.
    assert io_floor_s({"list": 960, "open": 3840}, 64, 0.02) == pytest.approx(1.5)
    # One new day: 48 listings, then 192 footers in three waves.
    assert io_floor_s({"list": 48, "open": 192}, 64, 0.02) == pytest.approx(0.08)
    assert io_floor_s({"list": 10}, 64, 0.02) == pytest.approx(0.02)
    assert io_floor_s({}, 64, 0.02) == 0


def test_bare_pool_runs_every_round_trip_after_its_listing() -> None:
    # 4 listings then 8 footers on 4 workers: at least 1 + 2 waves of 10 ms.
    assert bare_pool_s({"list": 4, "open": 8}, 4, 0.01) >= 0.03
    assert bare_pool_s({"open": 3}, 4, 0.01) >= 0.01
    assert bare_pool_s({}, 4, 0.01) < 0.01


@pytest.mark.parametrize("runs", ["0", "-2", "three"])
def test_bench_plan_rejects_a_run_count_it_cannot_take_a_median_of(
    runs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "plan", "--parallel-runs", runs])
    assert exit_info.value.code == 2
    assert "--parallel-runs" in capsys.readouterr().err
