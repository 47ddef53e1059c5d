"""The planning benchmark runs end to end on a tiny store (figures are not asserted: not a timed test)."""

import json
from pathlib import Path

import pytest

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
