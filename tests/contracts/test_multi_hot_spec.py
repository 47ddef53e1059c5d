"""The data contract's ``multi_hot`` columns: what is accepted and how each mistake is named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.contracts import SpecError, load_data_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "primus-data.yaml"

Doc = dict[str, Any]


@pytest.fixture
def doc() -> Doc:
    data: Doc = yaml.safe_load(EXAMPLE.read_text())
    schema = data["spec"]["sources"][0]["schema"]
    schema["multi_hot"] = [{"column": "recent_items", "pooling": "mean", "max_length": 20}]
    schema["transforms"].append({"column": "recent_items", "hash_bucket": 100000})
    return copy.deepcopy(data)


def schema_of(doc: Doc) -> Doc:
    schema: Doc = doc["spec"]["sources"][0]["schema"]
    return schema


def only_issue(document: Doc) -> tuple[str, str]:
    with pytest.raises(SpecError) as exc:
        load_data_spec(document)
    found = {i.path: i.message for i in exc.value.issues}
    assert len(found) == 1, found
    return next(iter(found.items()))


def test_a_multi_hot_column_is_read_and_defaults_to_sum_without_cap(doc: Doc) -> None:
    schema_of(doc)["multi_hot"].append({"column": "tags"})
    source = load_data_spec(doc).spec.sources[0].schema_
    first, second = source.multi_hot
    assert (first.column, first.pooling, first.max_length) == ("recent_items", "mean", 20)
    assert (second.column, second.pooling, second.max_length) == ("tags", "sum", None)
    assert source.multi_hot_columns == ["recent_items", "tags"]
    # Readers fetch them: after the single-valued IDs, before the dense columns.
    assert source.columns()[:4] == ["user_id", "item_id", "recent_items", "tags"]


def test_a_column_in_both_sparse_and_multi_hot(doc: Doc) -> None:
    schema_of(doc)["multi_hot"].append({"column": "item_id"})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.multi_hot[1].column"
    assert "'item_id' is listed more than once (first at sparse[1])" in message


def test_a_multi_hot_column_listed_twice(doc: Doc) -> None:
    schema_of(doc)["multi_hot"].append({"column": "recent_items", "pooling": "sum"})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.multi_hot[1].column"
    assert "first at multi_hot[0]" in message


def test_unknown_pooling_names_the_choices(doc: Doc) -> None:
    schema_of(doc)["multi_hot"][0]["pooling"] = "max"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.multi_hot[0].pooling"
    assert "'sum'" in message and "'mean'" in message


@pytest.mark.parametrize("length", [0, -3])
def test_max_length_must_be_at_least_one(doc: Doc, length: int) -> None:
    schema_of(doc)["multi_hot"][0]["max_length"] = length
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.multi_hot[0].max_length"
    assert "must be at least 1" in message


def test_fill_on_a_list_column_is_refused(doc: Doc) -> None:
    schema_of(doc)["transforms"].append({"column": "recent_items", "fill": 0})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[5].fill"
    assert "multi_hot (list) column" in message and "nothing to fill" in message


def test_cast_on_a_list_column_is_int64_or_string_only(doc: Doc) -> None:
    schema_of(doc)["transforms"].insert(0, {"column": "recent_items", "cast": "string"})
    load_data_spec(doc)
    schema_of(doc)["transforms"][0] = {"column": "recent_items", "cast": "float32"}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[0].cast"
    assert "may only be int64 or string (got 'float32')" in message


def test_hash_bucket_on_a_dense_column_names_both_groups(doc: Doc) -> None:
    schema_of(doc)["transforms"].append({"column": "price", "hash_bucket": 10})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[5].hash_bucket"
    assert "only sparse and multi_hot columns can be hash-bucketed" in message


# --- against a training document ------------------------------------------------------------------


def training(**model: Any) -> Any:
    from airflow_provider_primus.contracts.loader import load_training_spec

    return load_training_spec(
        {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusTraining", "metadata": {"name": "t"},
         "spec": {"model": model}}
    )  # fmt: skip


def with_lists_everywhere(doc: Doc) -> Doc:
    for source in doc["spec"]["sources"]:
        source["schema"]["multi_hot"] = [{"column": "recent_items", "pooling": "mean", "max_length": 20}]
        if source is not doc["spec"]["sources"][0]:
            source["schema"]["transforms"].append({"column": "recent_items", "hash_bucket": 100000})
    return doc


def test_a_list_column_gets_a_table_like_a_sparse_one(doc: Doc) -> None:
    from airflow_provider_primus.contracts.training import check_against, table_sizes

    data = load_data_spec(with_lists_everywhere(doc))
    assert table_sizes(training(), data)["recent_items"] == 100000
    assert table_sizes(training(buckets={"recent_items": 77}), data)["recent_items"] == 77
    check_against(training(sharding={"recent_items": "row_wise"}), data)


def test_every_source_must_declare_the_same_lists(doc: Doc) -> None:
    from airflow_provider_primus.contracts.training import check_against

    with_lists_everywhere(doc)
    doc["spec"]["sources"][1]["schema"]["multi_hot"][0]["pooling"] = "sum"
    with pytest.raises(SpecError) as exc:
        check_against(training(), load_data_spec(doc))
    [issue] = exc.value.issues
    assert issue.path == "<data>.spec.sources[1].schema.multi_hot"
    assert "must match sources[0]" in issue.message and "'pooling': 'mean'" in issue.message


def test_a_list_column_without_a_table_size_is_named(doc: Doc) -> None:
    from airflow_provider_primus.contracts.training import check_against

    with_lists_everywhere(doc)
    for source in doc["spec"]["sources"]:
        source["schema"]["transforms"] = [
            t for t in source["schema"]["transforms"] if t["column"] != "recent_items"
        ]
    with pytest.raises(SpecError) as exc:
        check_against(training(), load_data_spec(doc))
    [issue] = exc.value.issues
    assert issue.path == "spec.model.buckets.recent_items"
    assert "multi_hot column 'recent_items' has no hash_bucket transform" in issue.message
