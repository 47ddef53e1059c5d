"""``primus convert``, run in-process: a document at another contract version, and back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.contracts.versions import MODEL_ANNOTATION

GOLDEN = Path(__file__).resolve().parents[1] / "contracts" / "golden"
PYTHON = {"type": "python", "entrypoint": "acme.models:build", "options": {"tower": [8, 4]}}


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def training(version: str, **model: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"primus.dev/{version}",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {"model": model},
    }


def test_a_v1alpha1_document_using_v1beta1_fields_is_told_to_convert_and_converts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write(tmp_path / "old.yaml", training("v1alpha1", **PYTHON))
    assert main(["validate", str(old)]) == 2
    err = capsys.readouterr().err
    assert "spec.model.type: python (your own model) needs primus.dev/v1beta1" in err
    assert "`primus convert FILE --to v1beta1`" in err
    assert main(["convert", str(old), "--to", "v1beta1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == training("v1beta1", **PYTHON)


def test_down_and_up_again_through_files_is_the_same_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beta = write(tmp_path / "beta.yaml", training("v1beta1", **PYTHON))
    alpha = tmp_path / "alpha.json"
    assert main(["convert", str(beta), "--to", "v1alpha1", "-o", str(alpha)]) == 0
    written = json.loads(alpha.read_text())
    assert json.loads(written["metadata"]["annotations"][MODEL_ANNOTATION]) == PYTHON
    assert main(["validate", str(alpha)]) == 0  # v1alpha1 with the annotation: the same model
    assert (
        main(["convert", str(alpha), "--to", "primus.dev/v1beta1", "-o", str(tmp_path / "again.yaml")]) == 0
    )
    assert yaml.safe_load((tmp_path / "again.yaml").read_text()) == training("v1beta1", **PYTHON)
    capsys.readouterr()


def test_the_shipped_examples_convert(capsys: pytest.CaptureFixture[str]) -> None:
    job = GOLDEN / "v1alpha1" / "primus-job.yaml"
    assert main(["convert", str(job), "--to", "v1beta1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["apiVersion"] == "primus.dev/v1beta1"


@pytest.mark.parametrize(
    ("document", "to", "says"),
    [
        (training("v1beta1"), "v3", "PrimusTraining has no version 'v3'; its versions: v1alpha1, v1beta1"),
        ({**training("v1beta1"), "kind": "PrimusData"}, "v1beta1", "PrimusData has no version 'v1beta1'"),
        ({**training("v1beta1"), "kind": "Pod"}, "v1alpha1", "kind: must be one of PrimusData"),
        (training("v1beta1", type="python"), "v1alpha1", "type python needs entrypoint"),
    ],
)  # fmt: skip
def test_what_cannot_be_converted_exits_2_naming_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any], to: str, says: str
) -> None:
    path = write(tmp_path / "doc.yaml", document)
    assert main(["convert", str(path), "--to", to]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and says in captured.err
