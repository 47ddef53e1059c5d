"""``primus validate``, run in-process: no Kafka, no Airflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.cli.main import main
from tests.data.conftest import seconds_data_document

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "primus-data.yaml"


@pytest.fixture
def bad_spec(tmp_path: Path) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["sources"][0]["path_templte"] = doc["spec"]["sources"][0].pop("path_template")
    doc["spec"]["mixture"][0]["weight"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_valid_file_prints_one_ok_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["ok: PrimusData 'movielens': 2 sources"]
    assert captured.err == ""


def test_invalid_file_exits_2_listing_every_issue(bad_spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(bad_spec)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"error: {bad_spec}: 3 problems"
    assert set(lines[1:]) == {
        "spec.sources[0].path_template: required field is missing",
        "spec.sources[0].path_templte: unknown field; did you mean 'path_template'?",
        "spec.mixture[0].weight: must be greater than 0",
    }


def test_a_template_leaving_its_uri_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["sources"][0]["path_template"] = "../../../etc/{date}"
    path = tmp_path / "escape.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        "spec.sources[0].path_template: must stay inside uri: "
        "a '..' segment (or its percent-encoding) would leave it"
    ]


def test_missing_file_exits_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = tmp_path / "absent.yaml"
    assert main(["validate", str(absent)]) == 2
    assert f"{absent}: no such file" in capsys.readouterr().err.splitlines()


def test_yaml_syntax_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("kind: [PrimusData\n")
    assert main(["validate", str(broken)]) == 2
    assert f"{broken}: YAML syntax error at line 2" in capsys.readouterr().err


def test_any_invalid_file_fails_the_run_but_all_are_checked(
    bad_spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(bad_spec), str(EXAMPLE)]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["ok: PrimusData 'movielens': 2 sources"]
    assert f"error: {bad_spec}: 3 problems" in captured.err


def test_json_output(bad_spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json", str(EXAMPLE), str(bad_spec)]) == 2
    good, bad = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert good == {"file": str(EXAMPLE), "ok": True, "summary": "PrimusData 'movielens': 2 sources"}
    assert bad["ok"] is False
    assert {"path": "spec.mixture[0].weight", "message": "must be greater than 0"} in bad["issues"]


def test_training_documents_are_validated_by_their_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    training = EXAMPLE.with_name("primus-training.yaml")
    assert main(["validate", str(training)]) == 0
    assert capsys.readouterr().out.splitlines() == ["ok: PrimusTraining 'movielens': mode mixed, batch 512"]
    doc = yaml.safe_load(training.read_text())
    doc["spec"]["mixing"]["freshnes"] = doc["spec"]["mixing"].pop("freshness")
    bad = tmp_path / "training.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(bad)]) == 2
    out = capsys.readouterr()
    assert "spec.mixing.freshnes" in out.out + out.err and "freshness" in out.out + out.err


def test_job_documents_are_validated_with_their_references(capsys: pytest.CaptureFixture[str]) -> None:
    job = EXAMPLE.with_name("primus-job.yaml")
    assert main(["validate", str(job)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "ok: PrimusJob 'movielens': backend local, data executors 1..4, scaling on"
    ]
    assert captured.err == ""


def test_invalid_job_exits_2_naming_each_issue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(EXAMPLE.with_name("primus-job.yaml").read_text())
    doc["spec"]["rols"] = doc["spec"].pop("roles")
    doc["spec"]["scaling"]["actions"] = ["scale_ot"]
    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == f"error: {bad}: 2 problems"
    assert set(lines[1:]) == {
        "spec.rols: unknown field; did you mean 'roles'?",
        "spec.scaling.actions[0]: must be one of 'scale_out', 'scale_in', 'resize_cpu', 'resize_memory' "
        "(got 'scale_ot'); did you mean 'scale_out'?",
    }


def test_a_job_is_checked_against_the_documents_next_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The example's ``data: primus-data.yaml`` is relative to the job file: here there is none.
    job = tmp_path / "job.yaml"
    job.write_text(EXAMPLE.with_name("primus-job.yaml").read_text())
    assert main(["validate", "--json", str(job)]) == 2
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is False
    assert {
        "path": "spec.data",
        "message": f"{(tmp_path / 'primus-data.yaml').resolve()}: no such file",
    } in result["issues"]


def _seconds_store(tmp_path: Path, event_time: object) -> Path:
    """Three hours of Parquet history whose ``ts`` holds epoch seconds, and its data document."""
    path = tmp_path / "data.yaml"
    path.write_text(yaml.safe_dump(seconds_data_document(tmp_path, event_time, hours=3)))
    return path


def test_sample_reports_epoch_seconds_read_as_milliseconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _seconds_store(tmp_path, "ts")
    assert main(["validate", str(path)]) == 0  # the document alone cannot tell
    capsys.readouterr()
    assert main(["validate", "--sample", "100", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"error: {path}: 1 problem"
    assert lines[1].startswith("spec.sources[0].schema.event_time: source 'history': event time column 'ts'")
    assert "3 of 3 files" in lines[1] and "declare event_time: {column: ts, unit: s}" in lines[1]


def test_sample_passes_once_the_unit_is_declared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _seconds_store(tmp_path, {"column": "ts", "unit": "s"})
    assert main(["validate", "--sample", "100", "--json", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {
        "file": str(path),
        "ok": True,
        "summary": "PrimusData 'seconds': 1 source; sampled 100 rows per source",
    }


def test_sample_needs_a_positive_row_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--sample", "0", str(EXAMPLE)])
    assert exc.value.code == 2
    assert "--sample: must be at least 1 (got 0)" in capsys.readouterr().err
