"""``primus bench yarn`` runs end to end at a small size on the session's mini cluster (figures are
not asserted — not a timed test; the structure is)."""

import json
from pathlib import Path

import pytest

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.embedded.yarn import MiniYarnCluster

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]


def test_bench_yarn_prints_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yarn_cluster: MiniYarnCluster
) -> None:
    args = ["--rows", "20000", "--executors", "1", "--conf-dir", str(yarn_cluster.conf_dir)]
    assert main(["bench", "yarn", *args, "--workdir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["bench"] == "yarn" and result["rows"] == 20000
    assert result["allocation_to_serving_s"]["n"] == 1 and result["allocation_to_serving_s"]["p50"] > 0
    assert result["resize_applied_s"]["n"] == 2 and result["resize_applied_s"]["median"] > 0
    assert result["rows_per_s"]["local"] > 0 and result["rows_per_s"]["yarn"] > 0
    assert result["yarn_vs_local"] > 0
    assert list(tmp_path.iterdir()) == []  # the benchmark's files are removed
