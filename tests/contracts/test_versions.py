"""The contract's versions (contracts/versions.py): v1alpha1 is converted to the hub losslessly, the
model protocol is refused in v1alpha1 by name, and v1beta1 goes down with its annotation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.job import validate_job_spec
from airflow_provider_primus.contracts.training import validate_training_spec
from airflow_provider_primus.contracts.versions import MODEL_ANNOTATION, convert, to_hub

PYTHON = {"type": "python", "entrypoint": "acme.models:build", "options": {"tower": [32, 16]}}


def training(version: str, **model: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"primus.dev/{version}",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {"mode": "batch", "model": {"embedding_dim": 16, **model}},
    }


def messages(exc: pytest.ExceptionInfo[SpecError]) -> str:
    return str(exc.value)


def test_a_v1alpha1_document_means_what_it_meant() -> None:
    old = validate_training_spec(training("v1alpha1", type="dcn_v2", cross_layers=2))
    new = validate_training_spec(training("v1beta1", type="dcn_v2", cross_layers=2))
    assert old == new and old.api_version == "primus.dev/v1beta1"


@pytest.mark.parametrize("field", ["type", "entrypoint", "options"])
def test_v1alpha1_refuses_the_model_protocol_by_field(field: str) -> None:
    with pytest.raises(SpecError) as exc:
        validate_training_spec(training("v1alpha1", **{field: PYTHON[field]}))
    text = messages(exc)
    assert f"spec.model.{field}:" in text and "primus.dev/v1beta1" in text
    assert "primus convert FILE --to v1beta1" in text


def test_a_python_model_goes_down_into_the_annotation_and_comes_back() -> None:
    beta = training("v1beta1", **PYTHON)
    alpha = convert(beta, "v1alpha1")
    assert alpha["spec"]["model"] == {"embedding_dim": 16}  # nothing v1alpha1 cannot say
    assert json.loads(alpha["metadata"]["annotations"][MODEL_ANNOTATION]) == PYTHON
    assert convert(alpha, "v1beta1") == beta  # the round trip is the document itself
    assert convert(alpha, "primus.dev/v1beta1") == beta
    # Read at v1alpha1, the annotated document is still the python model (Kubernetes' convention).
    assert validate_training_spec(alpha) == validate_training_spec(beta)


def test_other_annotations_are_kept_beside_the_conversions() -> None:
    beta = {**training("v1beta1", **PYTHON), "metadata": {"name": "t", "annotations": {"team": "x"}}}
    alpha = convert(beta, "v1alpha1")
    assert set(alpha["metadata"]["annotations"]) == {"team", MODEL_ANNOTATION}
    assert convert(alpha, "v1beta1") == beta


def test_a_built_in_model_converts_without_an_annotation() -> None:
    beta = training("v1beta1", type="dcn_v2")
    assert convert(beta, "v1alpha1") == {**beta, "apiVersion": "primus.dev/v1alpha1"}


@pytest.mark.parametrize(
    ("document", "to", "says"),
    [
        (training("v1beta1"), "v2", "PrimusTraining has no version 'v2'; its versions: v1alpha1, v1beta1"),
        ({**training("v1beta1"), "kind": "Deployment"}, "v1beta1", "kind: must be one of PrimusData"),
        ({**training("v1beta1"), "apiVersion": "primus.dev/v9"}, "v1alpha1", "apiVersion: must be one of"),
        ({**training("v1alpha1"), "metadata": {"name": "t", "annotations": {MODEL_ANNOTATION: "{"}}},
         "v1beta1", f"metadata.annotations.{MODEL_ANNOTATION}: is not the JSON"),
    ],
)  # fmt: skip
def test_what_cannot_be_converted_is_named(document: dict[str, Any], to: str, says: str) -> None:
    with pytest.raises(SpecError) as exc:
        convert(document, to)
    assert says in messages(exc)


def test_an_unknown_version_is_named_with_the_known_ones() -> None:
    with pytest.raises(SpecError) as exc:
        validate_training_spec({**training("v1alpha1"), "apiVersion": "primus.dev/v2"})
    assert "apiVersion: must be one of 'primus.dev/v1alpha1', 'primus.dev/v1beta1' (got 'primus.dev/v2')" in (
        messages(exc)
    )


def test_a_job_of_either_version_is_the_same_job() -> None:
    job = {"kind": "PrimusJob", "metadata": {"name": "j"}, "spec": {"data": "d.yaml"}}
    old = validate_job_spec({**job, "apiVersion": "primus.dev/v1alpha1"})
    assert old == validate_job_spec({**job, "apiVersion": "primus.dev/v1beta1"})
    hub, issues = to_hub({**job, "apiVersion": "primus.dev/v1alpha1"}, "PrimusJob")
    assert hub["apiVersion"] == "primus.dev/v1beta1" and not issues


def test_the_conversion_annotation_is_refused_at_v1beta1() -> None:
    """At the hub it would turn into model fields on the next round trip: refused, by name."""
    beta = training("v1beta1", type="dlrm")
    beta["metadata"]["annotations"] = {MODEL_ANNOTATION: json.dumps(PYTHON)}
    with pytest.raises(SpecError) as exc:
        validate_training_spec(beta)
    assert f"metadata.annotations.{MODEL_ANNOTATION}: is written by a conversion" in messages(exc)
    with pytest.raises(SpecError) as exc:
        convert(beta, "v1alpha1")
    assert f"metadata.annotations.{MODEL_ANNOTATION}" in messages(exc)
