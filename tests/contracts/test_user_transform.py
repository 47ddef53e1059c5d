"""The python transform step (``type: python``) in a source's schema: accepted beside the per-column
steps, and every mistake reported at its document path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from airflow_provider_primus.contracts import SpecError, data_spec_json_schema, load_data_spec
from airflow_provider_primus.contracts.user_transform import PythonTransform

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "primus-data.yaml"
Doc = dict[str, Any]
STEP: Doc = {
    "type": "python",
    "function": "two_tower.features:time_and_price",
    "inputs": ["raw_price"],
    "outputs": ["price"],
    "options": {"timestamp": "ts", "unit": "s"},
}


@pytest.fixture
def doc() -> Doc:
    data: Doc = yaml.safe_load(EXAMPLE.read_text())
    return copy.deepcopy(data)


def transforms(doc: Doc) -> list[Doc]:
    steps: list[Doc] = doc["spec"]["sources"][0]["schema"]["transforms"]
    return steps


def issues(document: Doc) -> dict[str, str]:
    with pytest.raises(SpecError) as exc:
        load_data_spec(document)
    return {i.path: i.message for i in exc.value.issues}


def test_a_python_step_validates_beside_column_steps_and_dumps_as_written(doc: Doc) -> None:
    transforms(doc).insert(0, dict(STEP))
    schema = load_data_spec(doc).spec.sources[0].schema_
    [step] = schema.python_steps
    assert isinstance(step, PythonTransform) and step.function == STEP["function"]
    assert [t.column for t in schema.column_steps] == ["user_id", "item_id", "age", "age"]
    # The reader fetches the declared columns the function does not create, then its inputs.
    assert schema.raw_columns() == ["user_id", "item_id", "age", "rating", "ts", "raw_price"]
    dumped = load_data_spec(doc).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["spec"]["sources"][0]["schema"]["transforms"][0] == STEP
    assert load_data_spec(dumped) == load_data_spec(doc)


def test_the_json_schema_accepts_a_python_step(doc: Doc) -> None:
    transforms(doc).append(dict(STEP))
    jsonschema.validate(json.loads(json.dumps(doc, default=str)), data_spec_json_schema())


@pytest.mark.parametrize(
    ("step", "path", "message"),
    [
        ({"type": "python", "function": "acme.features"}, "transforms[4].function",
         "must look like 'package.module:function' (got 'acme.features')"),
        ({"type": "python", "function": "acme:fn", "column": "age"}, "transforms[4].column",
         "a python step is given the whole batch and takes no 'column'"),
        ({"type": "python", "function": "acme:fn", "hash_bucket": 3}, "transforms[4].hash_bucket",
         "takes no 'hash_bucket'; put per-column steps in their own list entries"),
        ({"function": "acme:fn"}, "transforms[4].type", "required field is missing; must be 'python'"),
        ({"type": "sql", "function": "acme:fn"}, "transforms[4].type", "must be 'python' (got 'sql')"),
        ({"type": "python"}, "transforms[4].function", "required field is missing"),
        ({"type": "python", "function": "acme:fn", "outputs": ["prise"]}, "transforms[4].outputs[0]",
         "unknown column 'prise'; outputs name columns declared in sparse, multi_hot, dense, label or "
         "event_time that the function creates; did you mean 'price'?"),
        ({"type": "python", "function": "acme:fn", "inputs": ["price"], "outputs": ["price"]},
         "transforms[4].inputs[0]", "'price' is also in outputs"),
        ({"type": "python", "function": "acme:fn", "output": ["price"]}, "transforms[4].output",
         "unknown field; did you mean 'outputs'?"),
    ],
)  # fmt: skip
def test_a_bad_python_step_is_refused_by_its_field(doc: Doc, step: Doc, path: str, message: str) -> None:
    transforms(doc).append(step)
    found = issues(doc)
    assert list(found) == [f"spec.sources[0].schema.{path}"], found
    assert message in found[f"spec.sources[0].schema.{path}"]


def test_column_steps_keep_their_errors_beside_a_python_step(doc: Doc) -> None:
    transforms(doc)[:0] = [dict(STEP), {"column": "age", "cast": "int8"}]
    found = issues(doc)
    assert list(found) == ["spec.sources[0].schema.transforms[1].cast"]
    assert "got 'int8'" in found["spec.sources[0].schema.transforms[1].cast"]
