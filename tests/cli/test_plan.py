import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.data.graph import TaskGraph
from tests.data.conftest import T0, files_source, hour_dir, spec_doc, write


def spec_file(tmp_path: Path, **source_kw) -> Path:
    for h in range(3):
        write(hour_dir(tmp_path / "store", T0 + timedelta(hours=h)) / "a.parquet", "parquet", 20)
    path = tmp_path / "data.yaml"
    path.write_text(yaml.safe_dump(spec_doc([files_source("s", tmp_path / "store", **source_kw)])))
    return path


def test_plan_prints_summary_and_writes_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = spec_file(tmp_path)
    out = tmp_path / "graph.parquet"
    args = ["plan", str(spec), "--start", T0.isoformat(), "--end", (T0 + timedelta(hours=3)).isoformat()]
    code = main([*args, "--out", str(out), "--cache", str(tmp_path / "cache.sqlite")])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["partitions"], summary["files"], summary["tasks"], summary["rows"]) == (3, 3, 3, 60)
    assert summary["bytes"] > 0 and summary["wall_s"] >= 0 and summary["missing"] == []
    assert len(TaskGraph.read(out).tasks) == 3
    # Second run: everything from the plan cache.
    assert main([*args, "--cache", str(tmp_path / "cache.sqlite")]) == 0
    assert json.loads(capsys.readouterr().out)["cached_partitions"] == 3


def test_plan_reports_a_missing_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = spec_file(tmp_path, success_marker="_SUCCESS")
    code = main(
        [
            "plan",
            str(spec),
            "--start",
            T0.isoformat(),
            "--end",
            (T0 + timedelta(hours=1)).isoformat(),
            "--no-cache",
        ]
    )
    assert code == 1
    assert "no success marker _SUCCESS" in capsys.readouterr().err


def test_plan_rejects_an_invalid_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: primus.dev/v1alpha1\nkind: PrimusData\nmetadata: {name: x}\nspec: {sourcs: []}\n"
    )
    assert main(["plan", str(bad), "--start", T0.isoformat(), "--end", T0.isoformat()]) == 2
    assert "did you mean 'sources'?" in capsys.readouterr().err


def test_plan_needs_a_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(spec_file(tmp_path))]) == 2
    assert "no window" in capsys.readouterr().err
