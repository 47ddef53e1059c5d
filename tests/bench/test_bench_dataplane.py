"""The data-plane benchmark runs end to end on a tiny store (figures are not asserted: not a timed test)."""

import json
from pathlib import Path

import pytest

from airflow_provider_primus.cli.main import main


def test_bench_dataplane_prints_one_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "bench",
            "dataplane",
            "--rows",
            "40000",
            "--files",
            "4",
            "--batch-rows",
            "2048",
            "--message-rows",
            "4096",
            "--window",
            "4",
            "--credits",
            "4",
            "--rounds",
            "2",
            "--workdir",
            str(tmp_path),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["rows"] == 40_000  # 4 files x 10,000 rows, every one delivered by each variant
    assert result["files"] == 4 and result["tasks"] == 4
    assert (result["batch_rows"], result["message_rows"], result["window"], result["credits"]) == (
        2048,
        4096,
        4,
        4,
    )
    assert result["rounds"] == 2 and len(result["ratio_rounds"]) == 2
    for key in (
        "bare_rows_s",
        "e2e1_rows_s",
        "e2e2_rows_s",
        "ratio",
        "ratio2",
        "loader_cpu_s_per_mrow",
        "bare_cpu_s_per_mrow",
        "cpu_ratio",
    ):
        assert result[key] > 0, key
    assert result["peak_rss_mb"]["executor"] > 0
    assert result["peak_rss_mb"]["loader"] >= 0
    assert list(tmp_path.iterdir()) == []  # the generated store is cleaned up


def test_bench_dataplane_adds_the_object_store_and_tls_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], s3_binary: Path
) -> None:
    """The same pipeline from a real S3-compatible server the benchmark starts, and over TLS: both
    deliver every planned row (the benchmark checks that itself) and their figures sit beside the
    local ones. ``s3_binary`` skips where Go is missing (the benchmark builds the same binary)."""
    del s3_binary
    args = ["bench", "dataplane", "--rows", "20000", "--files", "2", "--batch-rows", "2048"]
    args += ["--message-rows", "4096", "--rounds", "1", "--store", "s3", "--tls", "--workdir", str(tmp_path)]
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["rows"] == 20_000 and (result["store"], result["tls"]) == ("s3", True)
    for key in ("e2e1_rows_s", "e2e1_s3_rows_s", "e2e1_tls_rows_s", "s3_vs_local"):
        assert result[key] > 0, key
    assert result["tls_cost"] < 1  # a fraction of the plain rate: TLS delivered rows too
    assert len(result["s3_vs_local_rounds"]) == len(result["tls_cost_rounds"]) == 1
    assert set(result["service_cpu_s_per_mrow"]) == {"e2e1", "e2e1_s3", "e2e1_tls"}
    assert all(cpu > 0 for cpu in result["service_cpu_s_per_mrow"].values())
    assert result["executor_bad_exits"] == 0
    assert list(tmp_path.iterdir()) == []  # the store, the server's data and the CA are cleaned up
