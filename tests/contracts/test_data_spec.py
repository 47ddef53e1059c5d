"""PrimusData: the example validates, and every kind of mistake is reported at its document path."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.contracts import (
    FileSource,
    KafkaSource,
    PrimusData,
    SpecError,
    SpecIssue,
    data_spec_json_schema,
    load_data_spec,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "primus-data.yaml"

Doc = dict[str, Any]


@pytest.fixture
def doc() -> Doc:
    data: Doc = yaml.safe_load(EXAMPLE.read_text())
    return copy.deepcopy(data)


def issues(document: Doc) -> dict[str, str]:
    """path → message for every issue; fails the test if the document validates."""
    with pytest.raises(SpecError) as exc:
        load_data_spec(document)
    found = {i.path: i.message for i in exc.value.issues}
    assert len(found) == len(exc.value.issues), f"two issues share a path: {exc.value}"
    return found


def only_issue(document: Doc) -> tuple[str, str]:
    found = issues(document)
    assert len(found) == 1, found
    return next(iter(found.items()))


def files(doc: Doc) -> Doc:
    source: Doc = doc["spec"]["sources"][0]
    return source


def kafka(doc: Doc) -> Doc:
    source: Doc = doc["spec"]["sources"][1]
    return source


# --- the example ---------------------------------------------------------------------------------


def test_example_file_validates() -> None:
    spec = load_data_spec(EXAMPLE)
    assert spec.api_version == "primus.dev/v1alpha1"
    assert spec.kind == "PrimusData"
    assert spec.metadata.name == "movielens"
    assert [s.name for s in spec.spec.sources] == ["history", "events"]
    history, events = spec.spec.sources
    assert isinstance(history, FileSource) and isinstance(events, KafkaSource)
    assert spec.spec.window is not None
    assert spec.spec.window.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert spec.spec.window.start.utcoffset() == timedelta(0)
    assert spec.spec.planning.target_rows_per_task == 100_000
    assert [(m.source, m.weight, m.priority) for m in spec.spec.mixture] == [
        ("history", 0.7, 1),
        ("events", 0.3, 0),
    ]
    assert history.missing.policy == "wait" and history.missing.timeout_s == 600
    assert events.start.policy == "timestamp" and events.start.timestamp == datetime(2026, 11, 1, tzinfo=UTC)
    assert events.servers() == ["127.0.0.1:9092"]


def test_str_path_and_json_file_validate_too(tmp_path: Path, doc: Doc) -> None:
    as_json = tmp_path / "spec.json"
    as_json.write_text(json.dumps(doc))
    assert load_data_spec(str(as_json)) == load_data_spec(EXAMPLE)


def test_rule_label_is_parsed_and_column_label_has_no_rule() -> None:
    spec = load_data_spec(EXAMPLE)
    history, events = spec.spec.sources
    label = history.schema_.label
    assert (label.column, label.op, label.value) == ("rating", ">=", 4.0)
    assert (events.schema_.label.column, events.schema_.label.op, events.schema_.label.value) == (
        "clicked",
        None,
        None,
    )


def test_defaults_apply_when_optional_sections_are_absent(doc: Doc) -> None:
    for key in ("window", "ordered", "planning", "mixture"):
        del doc["spec"][key]
    del files(doc)["missing"]
    del files(doc)["success_marker"]
    spec = load_data_spec(doc)
    assert spec.spec.window is None and spec.spec.ordered is False and spec.spec.mixture == []
    planning = spec.spec.planning
    assert (planning.target_rows_per_task, planning.min_rows_per_task, planning.workers) == (
        100_000,
        10_000,
        64,
    )
    history = spec.spec.source("history")
    assert isinstance(history, FileSource)
    assert history.missing.policy == "fail" and history.missing.timeout_s is None
    assert history.success_marker is None


def test_naive_window_is_utc_and_offsets_are_converted(doc: Doc) -> None:
    doc["spec"]["window"] = {"start": "2026-11-01T00:00:00", "end": "2026-11-01T03:00:00+02:00"}
    window = load_data_spec(doc).spec.window
    assert window is not None
    assert window.start == datetime(2026, 11, 1, tzinfo=UTC) and window.start.tzinfo is UTC
    assert window.end.tzinfo is UTC and window.end.hour == 1


def test_source_lookup_names_the_known_sources() -> None:
    spec = load_data_spec(EXAMPLE)
    assert spec.spec.source("events").name == "events"
    with pytest.raises(KeyError, match="known sources: history, events"):
        spec.spec.source("nope")


def test_models_are_frozen() -> None:
    spec = load_data_spec(EXAMPLE)
    with pytest.raises(ValueError, match="frozen"):
        spec.spec.planning.workers = 3  # type: ignore[misc]


def test_dump_validates_again() -> None:
    spec = load_data_spec(EXAMPLE)
    assert load_data_spec(spec.model_dump(by_alias=True)) == spec


# --- FileSource helpers --------------------------------------------------------------------------


def test_render_path_hourly_zero_pads(doc: Doc) -> None:
    source = load_data_spec(doc).spec.source("history")
    assert isinstance(source, FileSource)
    assert source.render_path(datetime(2026, 3, 4, 5, tzinfo=UTC)) == "2026-03-04/05"
    # Partition times are UTC: a local time is converted, a naive one is taken as UTC.
    plus_two = timezone(timedelta(hours=2))
    assert source.render_path(datetime(2026, 3, 4, 1, tzinfo=plus_two)) == "2026-03-03/23"
    assert source.render_path(datetime(2026, 3, 4, 5)) == "2026-03-04/05"


def test_render_path_daily_with_split_date(doc: Doc) -> None:
    files(doc).update(path_template="year={year}/month={month}/day={day}", granularity="day")
    source = load_data_spec(doc).spec.source("history")
    assert isinstance(source, FileSource)
    assert source.render_path(datetime(2026, 1, 9, tzinfo=UTC)) == "year=2026/month=01/day=09"


def test_columns_in_order_without_duplicates(doc: Doc) -> None:
    files(doc)["schema"].update(
        sparse=["user_id", "item_id"], dense=["age"], label={"column": "clicked"}, event_time="ts"
    )
    source = load_data_spec(doc).spec.source("history")
    assert isinstance(source, FileSource)
    assert source.columns() == ["user_id", "item_id", "age", "clicked", "ts"]
    files(doc)["schema"].update(label={"rule": "age > 30"}, event_time=None)
    source = load_data_spec(doc).spec.source("history")
    assert isinstance(source, FileSource)
    assert source.columns() == ["user_id", "item_id", "age"]


# --- errors: one per kind of mistake -------------------------------------------------------------


def test_unknown_field_suggests_the_closest_name(doc: Doc) -> None:
    files(doc)["path_templte"] = files(doc).pop("path_template")
    found = issues(doc)
    assert found["spec.sources[0].path_templte"] == "unknown field; did you mean 'path_template'?"
    assert found["spec.sources[0].path_template"] == "required field is missing"


def test_unknown_field_without_close_match_lists_the_valid_fields(doc: Doc) -> None:
    doc["spec"]["planning"]["zzz"] = 1
    path, message = only_issue(doc)
    assert path == "spec.planning.zzz"
    assert message == "unknown field; valid fields are: target_rows_per_task, min_rows_per_task, workers"


def test_python_attribute_name_is_not_a_valid_key(doc: Doc) -> None:
    files(doc)["schema_"] = files(doc).pop("schema")
    found = issues(doc)
    assert found["spec.sources[0].schema_"] == "unknown field; did you mean 'schema'?"
    assert found["spec.sources[0].schema"] == "required field is missing"


def test_unknown_field_inside_a_kafka_source_has_no_tag_in_its_path(doc: Doc) -> None:
    kafka(doc)["topik"] = kafka(doc).pop("topic")
    found = issues(doc)
    assert found["spec.sources[1].topik"] == "unknown field; did you mean 'topic'?"
    assert not any(".kafka" in path or ".files" in path for path in found)


def test_bad_source_type(doc: Doc) -> None:
    files(doc)["type"] = "file"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].type"
    assert message.startswith("must be one of 'delta', 'files', 'iceberg', 'kafka'")
    assert "did you mean 'files'?" in message


def test_missing_source_type(doc: Doc) -> None:
    del kafka(doc)["type"]
    path, message = only_issue(doc)
    assert path == "spec.sources[1].type"
    assert "required" in message and "'delta', 'files', 'iceberg', 'kafka'" in message


def test_bad_enum_names_the_allowed_values(doc: Doc) -> None:
    files(doc)["format"] = "parket"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].format"
    assert "must be one of 'parquet', 'csv', 'jsonl'" in message and "did you mean 'parquet'" in message


def test_api_version_and_kind_say_what_is_expected(doc: Doc) -> None:
    doc["apiVersion"] = "primus.dev/v1"
    doc["kind"] = "PrimusJob"
    found = issues(doc)
    assert "must be 'primus.dev/v1alpha1'" in found["apiVersion"]
    assert "must be 'PrimusData'" in found["kind"]


def test_missing_api_version(doc: Doc) -> None:
    del doc["apiVersion"]
    path, message = only_issue(doc)
    assert path == "apiVersion"
    assert "required" in message and "primus.dev/v1alpha1" in message


def test_window_end_must_be_after_start(doc: Doc) -> None:
    doc["spec"]["window"]["end"] = doc["spec"]["window"]["start"]
    path, message = only_issue(doc)
    assert path == "spec.window.end"
    assert "must be after start" in message


def test_hour_placeholder_with_day_granularity(doc: Doc) -> None:
    files(doc)["granularity"] = "day"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].path_template"
    assert "granularity 'day' cannot use {hour}" in message


def test_hour_granularity_needs_hour_placeholder(doc: Doc) -> None:
    files(doc)["path_template"] = "{date}"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].path_template"
    assert "needs an {hour} placeholder" in message


def test_unknown_placeholder(doc: Doc) -> None:
    files(doc)["path_template"] = "{date}/{hour}/{minute}"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].path_template"
    assert "unknown placeholder {minute}" in message and "{date}, {year}, {month}, {day}, {hour}" in message


def test_template_needs_a_day_level_placeholder(doc: Doc) -> None:
    files(doc)["path_template"] = "{year}/{month}/{hour}"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].path_template"
    assert "needs a day-level placeholder" in message


@pytest.mark.parametrize(
    "template",
    [
        "../../../{date}/{hour}",
        "{date}/../../{hour}",
        "{date}/{hour}/..",
        "..\\{date}/{hour}",
        "%2e%2e/{date}/{hour}",
        "{date}/%2E%2e/{hour}",
        "%252e%252e/{date}/{hour}",
    ],
)
def test_template_must_stay_inside_its_uri(doc: Doc, template: str) -> None:
    files(doc)["path_template"] = template
    path, message = only_issue(doc)
    assert path == "spec.sources[0].path_template"
    assert "must stay inside uri" in message


@pytest.mark.parametrize(
    "uri", ["file:///data/../etc", "s3://bucket/a/%2e%2e/b", "/data/%252E%252E/x", "hdfs://nn/x/.."]
)
def test_uri_must_not_climb(doc: Doc, uri: str) -> None:
    files(doc)["uri"] = uri
    path, message = only_issue(doc)
    assert path == "spec.sources[0].uri"
    assert "'..' segment" in message


def test_uri_may_use_dots_inside_names(doc: Doc) -> None:
    files(doc)["uri"] = "file:///data/v1..2/x.."
    source = load_data_spec(doc).spec.sources[0]
    assert isinstance(source, FileSource) and source.uri == "file:///data/v1..2/x.."


def test_template_may_use_dots_inside_names(doc: Doc) -> None:
    files(doc)["path_template"] = "v1..2/{date}.d/{hour}..x"
    source = load_data_spec(doc).spec.sources[0]
    assert isinstance(source, FileSource)
    assert source.render_path(datetime(2026, 1, 2, 3, tzinfo=UTC)) == "v1..2/2026-01-02.d/03..x"


def test_label_is_required(doc: Doc) -> None:
    del files(doc)["schema"]["label"]
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.label"
    assert "required" in message


def test_missing_label_policy(doc: Doc) -> None:
    spec = load_data_spec(doc).spec
    assert spec.sources[0].schema_.missing_label == "drop"  # the default: leave out and count
    files(doc)["schema"]["missing_label"] = "fail"
    assert load_data_spec(doc).spec.sources[0].schema_.missing_label == "fail"
    files(doc)["schema"]["missing_label"] = "zero"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.missing_label" and "'drop'" in message and "'fail'" in message


def test_a_stream_never_fails_on_a_missing_label(doc: Doc) -> None:
    kafka(doc)["schema"]["missing_label"] = "fail"
    path, message = only_issue(doc)
    assert path == "spec.sources[1].schema.missing_label"
    assert "files sources only" in message and "dead-letters" in message


def test_label_takes_column_or_rule_not_both(doc: Doc) -> None:
    files(doc)["schema"]["label"] = {"column": "clicked", "rule": "rating >= 4"}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.label"
    assert "exactly one of 'column' or 'rule'" in message


def test_empty_label(doc: Doc) -> None:
    files(doc)["schema"]["label"] = {}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.label"
    assert "must define the label" in message


@pytest.mark.parametrize("rule", ["rating => 4", "rating >= four", "rating", ">= 4", "a b >= 1"])
def test_bad_label_rule(doc: Doc, rule: str) -> None:
    files(doc)["schema"]["label"] = {"rule": rule}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.label.rule"
    assert "must look like '<column> <op> <number>'" in message


def test_unknown_label_key_is_a_typo_not_a_missing_label(doc: Doc) -> None:
    files(doc)["schema"]["label"] = {"rul": "rating >= 4"}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.label.rul"
    assert message == "unknown field; did you mean 'rule'?"


def test_event_time_is_a_column_or_a_column_with_its_unit(doc: Doc) -> None:
    spec = load_data_spec(doc).spec
    history, events = spec.sources
    assert history.schema_.event_time is not None and events.schema_.event_time is not None
    assert (history.schema_.event_time.column, history.schema_.event_time.unit) == ("ts", "s")
    # The plain form stays valid: no unit declared, integers read as milliseconds.
    assert (events.schema_.event_time.column, events.schema_.event_time.unit) == ("ts", None)
    assert events.schema_.event_time.integer_unit == "ms"
    assert events.schema_.event_time_column == "ts" and "ts" in history.columns()
    for unit in ("s", "ms", "us", "ns"):
        kafka(doc)["schema"]["event_time"] = {"column": "ts", "unit": unit}
        declared = load_data_spec(doc).spec.sources[1].schema_.event_time
        assert declared is not None and declared.integer_unit == unit


def test_event_time_dumps_as_written() -> None:
    spec = load_data_spec(EXAMPLE)
    dumped = spec.model_dump(by_alias=True)
    assert dumped["spec"]["sources"][0]["schema"]["event_time"] == {"column": "ts", "unit": "s"}
    assert dumped["spec"]["sources"][1]["schema"]["event_time"] == "ts"
    assert load_data_spec(dumped) == spec


def test_event_time_unit_names_the_allowed_units(doc: Doc) -> None:
    files(doc)["schema"]["event_time"] = {"column": "ts", "unit": "seconds"}
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.event_time.unit"
    assert message.startswith("must be one of 's', 'ms', 'us', 'ns' (got 'seconds')")


def test_event_time_unknown_key_and_wrong_type(doc: Doc) -> None:
    files(doc)["schema"]["event_time"] = {"column": "ts", "units": "s"}
    assert only_issue(doc) == (
        "spec.sources[0].schema.event_time.units",
        "unknown field; did you mean 'unit'?",
    )
    files(doc)["schema"]["event_time"] = {"unit": "s"}
    assert only_issue(doc) == ("spec.sources[0].schema.event_time.column", "required field is missing")
    files(doc)["schema"]["event_time"] = 5
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.event_time"
    assert message.startswith("must be a column name or {column: <name>, unit: s|ms|us|ns}")


def test_a_transform_may_name_the_event_time_column(doc: Doc) -> None:
    files(doc)["schema"]["transforms"].append({"column": "ts", "fill": 0})
    assert load_data_spec(doc).spec.sources[0].schema_.transforms[-1].column == "ts"


@pytest.mark.parametrize("weight", [0, -0.5])
def test_weight_must_be_positive(doc: Doc, weight: float) -> None:
    doc["spec"]["mixture"][0]["weight"] = weight
    path, message = only_issue(doc)
    assert path == "spec.mixture[0].weight"
    assert message == "must be greater than 0"


def test_boolean_is_not_a_weight(doc: Doc) -> None:
    doc["spec"]["mixture"][1]["weight"] = True
    assert only_issue(doc) == ("spec.mixture[1].weight", "must be a number")


def test_unknown_mixture_source(doc: Doc) -> None:
    doc["spec"]["mixture"][0]["source"] = "histroy"
    path, message = only_issue(doc)
    assert path == "spec.mixture[0].source"
    assert "unknown source 'histroy'" in message and "did you mean 'history'" in message


def test_mixture_names_each_source_once(doc: Doc) -> None:
    doc["spec"]["mixture"][1]["source"] = "history"
    path, message = only_issue(doc)
    assert path == "spec.mixture[1].source"
    assert "appears twice" in message


def test_duplicate_source_names(doc: Doc) -> None:
    kafka(doc)["name"] = "history"
    doc["spec"]["mixture"].pop()
    path, message = only_issue(doc)
    assert path == "spec.sources[1].name"
    assert "duplicate source name 'history'" in message


def test_transform_on_unknown_column(doc: Doc) -> None:
    files(doc)["schema"]["transforms"].append({"column": "agee", "fill": 1})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[4].column"
    assert "unknown column 'agee'" in message and "did you mean 'age'" in message


def test_hash_bucket_only_on_sparse_columns(doc: Doc) -> None:
    files(doc)["schema"]["transforms"].append({"column": "price", "hash_bucket": 10})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[4].hash_bucket"
    assert "only sparse and multi_hot columns can be hash-bucketed" in message


def test_transform_has_exactly_one_kind(doc: Doc) -> None:
    files(doc)["schema"]["transforms"].append({"column": "age", "fill": 0, "cast": "int64"})
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.transforms[4]"
    assert "exactly one of 'hash_bucket', 'fill', 'cast'" in message


def test_column_listed_twice(doc: Doc) -> None:
    files(doc)["schema"]["dense"].append("user_id")
    path, message = only_issue(doc)
    assert path == "spec.sources[0].schema.dense[2]"
    assert "listed more than once (first at sparse[0])" in message


def test_timestamp_policy_needs_a_timestamp(doc: Doc) -> None:
    del kafka(doc)["start"]["timestamp"]
    path, message = only_issue(doc)
    assert path == "spec.sources[1].start.timestamp"
    assert "required when policy is 'timestamp'" in message


def test_timestamp_only_with_timestamp_policy(doc: Doc) -> None:
    kafka(doc)["start"]["policy"] = "latest"
    path, message = only_issue(doc)
    assert path == "spec.sources[1].start.timestamp"
    assert "only allowed with policy 'timestamp'" in message


def test_timeout_only_with_wait_policy(doc: Doc) -> None:
    files(doc)["missing"]["policy"] = "skip"
    path, message = only_issue(doc)
    assert path == "spec.sources[0].missing.timeout_s"
    assert "only allowed with policy 'wait'" in message


@pytest.mark.parametrize("servers", ["localhost", "a:9092,", "a:99999", "a:9092, b", "http://a:9092"])
def test_bad_bootstrap_servers(doc: Doc, servers: str) -> None:
    kafka(doc)["bootstrap_servers"] = servers
    path, message = only_issue(doc)
    assert path == "spec.sources[1].bootstrap_servers"
    assert "host:port" in message


def test_good_bootstrap_servers(doc: Doc) -> None:
    kafka(doc)["bootstrap_servers"] = "a.example.com:9092, 10.0.0.1:9093,[::1]:9094"
    events = load_data_spec(doc).spec.source("events")
    assert isinstance(events, KafkaSource)
    assert events.servers() == ["a.example.com:9092", "10.0.0.1:9093", "[::1]:9094"]


@pytest.mark.parametrize("topic", ["with space", "..", "x" * 250, ""])
def test_bad_topic(doc: Doc, topic: str) -> None:
    kafka(doc)["topic"] = topic
    path, message = only_issue(doc)
    assert path == "spec.sources[1].topic"
    assert "Kafka topic name" in message


@pytest.mark.parametrize("name", ["MovieLens", "movie_lens", "-a", "a" * 64])
def test_metadata_name_is_a_dns_label(doc: Doc, name: str) -> None:
    doc["metadata"]["name"] = name
    path, message = only_issue(doc)
    assert path == "metadata.name"
    assert "DNS-1123" in message


def test_planning_minimum_not_above_target(doc: Doc) -> None:
    doc["spec"]["planning"]["min_rows_per_task"] = 200_000
    assert only_issue(doc) == (
        "spec.planning.min_rows_per_task",
        "must not exceed target_rows_per_task (100000)",
    )


def test_no_sources(doc: Doc) -> None:
    doc["spec"]["sources"] = []
    del doc["spec"]["mixture"]
    assert only_issue(doc) == ("spec.sources", "must have at least 1 item(s)")


def test_multiple_errors_are_reported_together(doc: Doc) -> None:
    doc["metadata"]["name"] = "Bad_Name"
    files(doc)["type"] = "file"  # this source fails entirely...
    kafka(doc)["topic"] = "bad topic"
    files(doc)["schema"]["label"] = {}
    doc["spec"]["mixture"][0]["weight"] = -1
    doc["spec"]["mixture"][1]["source"] = "nope"  # ...yet the mixture is still checked
    found = issues(doc)
    assert set(found) == {
        "metadata.name",
        "spec.sources[0].type",
        "spec.sources[1].topic",
        "spec.mixture[0].weight",
        "spec.mixture[1].source",
    }
    with pytest.raises(SpecError) as exc:
        load_data_spec(doc)
    lines = str(exc.value).splitlines()
    assert len(lines) == 5
    assert f"spec.mixture[1].source: {found['spec.mixture[1].source']}" in lines


def test_errors_in_sibling_sources_are_all_reported(doc: Doc) -> None:
    files(doc)["granularity"] = "day"
    kafka(doc)["start"]["policy"] = "earliest"
    assert set(issues(doc)) == {"spec.sources[0].path_template", "spec.sources[1].start.timestamp"}


# --- the loader ----------------------------------------------------------------------------------


def test_yaml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: primus.dev/v1alpha1\nkind: PrimusData\nmetadata: {name: x\nspec: {}\n")
    with pytest.raises(SpecError) as exc:
        load_data_spec(bad)
    [issue] = exc.value.issues
    assert issue.path == str(bad)
    assert issue.message.startswith("YAML syntax error at line 4, column")


def test_duplicate_yaml_keys_are_errors(tmp_path: Path) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text("kind: PrimusData\nkind: PrimusJob\n")
    with pytest.raises(SpecError) as exc:
        load_data_spec(dup)
    assert exc.value.issues == [
        SpecIssue(
            str(dup),
            "YAML error at line 2, column 1: found duplicate key 'kind'; "
            "each key may appear once per mapping",
        )
    ]


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="top level must be a mapping"):
        load_data_spec(listed)


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_data_spec(tmp_path / "absent.yaml")
    other = tmp_path / "spec.toml"
    other.write_text("x = 1\n")
    with pytest.raises(SpecError, match=r"use \.yaml, \.yml or \.json"):
        load_data_spec(other)


def test_spec_error_is_a_value_error_listing_each_issue() -> None:
    error = SpecError([SpecIssue("a.b", "first"), SpecIssue("c[0]", "second")])
    assert isinstance(error, ValueError)
    assert str(error) == "a.b: first\nc[0]: second"


# --- JSON Schema ---------------------------------------------------------------------------------


def test_json_schema_describes_the_document() -> None:
    schema = data_spec_json_schema()
    assert isinstance(schema, dict)
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(schema["required"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert schema["additionalProperties"] is False
    defs = schema["$defs"]
    assert "schema" in defs["FileSource"]["properties"] and "schema_" not in defs["FileSource"]["properties"]
    assert set(defs["Label"]["properties"]) == {"column", "rule"}
    assert [form["type"] for form in defs["EventTime"]["anyOf"]] == ["string", "object"]
    assert defs["EventTime"]["anyOf"][1]["properties"]["unit"]["enum"] == ["s", "ms", "us", "ns"]
    json.dumps(schema)  # serializable, for the CRD generator


def test_json_schema_accepts_the_example_and_rejects_a_typo(doc: Doc) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = data_spec_json_schema()
    as_json: Doc = json.loads(json.dumps(doc, default=str))
    jsonschema.validate(as_json, schema)
    files(as_json)["schema"]["event_time"] = "ts"  # the plain form
    jsonschema.validate(as_json, schema)
    files(as_json)["schema"]["event_time"] = {"column": "ts", "unit": "minutes"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(as_json, schema)
    files(as_json)["schema"]["event_time"] = {"column": "ts", "unit": "s"}
    files(as_json)["path_templte"] = files(as_json).pop("path_template")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(as_json, schema)


def test_primus_data_model_validate_enforces_cross_field_checks(doc: Doc) -> None:
    """Constructing the model directly (not through the loader) is just as strict."""
    doc["spec"]["mixture"][0]["source"] = "nope"
    with pytest.raises(ValueError, match=r"mixture\[0\]\.source: unknown source 'nope'"):
        PrimusData.model_validate(doc)


# --- a stream's event-time policy ------------------------------------------------------------------


def test_event_time_policy_defaults_to_dead_letter_beyond_an_hour_ahead_or_before_2000(doc: Doc) -> None:
    events = load_data_spec(doc).spec.source("events")
    assert isinstance(events, KafkaSource)
    policy = events.event_time_policy
    assert policy.max_ahead_s == 3600 and policy.action == "dead_letter"
    assert policy.min_event_time == datetime(2000, 1, 1, tzinfo=UTC)


def test_event_time_policy_as_written(doc: Doc) -> None:
    kafka(doc)["event_time_policy"] = {
        "max_ahead_s": 86400,
        "min_event_time": "2020-06-01T00:00:00+02:00",
        "action": "clamp",
    }
    events = load_data_spec(doc).spec.source("events")
    assert isinstance(events, KafkaSource)
    policy = events.event_time_policy
    assert policy.max_ahead_ms == 86_400_000 and policy.action == "clamp"
    assert policy.min_event_time == datetime(2020, 5, 31, 22, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("max_ahead_s", 0, "greater than 0"),
        ("max_ahead_s", -60, "greater than 0"),
        ("max_ahead_s", 1e12, "must be at most 31622400"),
        ("max_ahead_s", "1h", "must be a number"),
        ("max_ahead_s", float("inf"), "finite number"),
        ("action", "drop", "must be one of 'dead_letter', 'clamp' (got 'drop')"),
        ("min_event_time", "yesterday", "ISO 8601 date-time"),
        ("max_ahead", 60, "unknown field; did you mean 'max_ahead_s'?"),
    ],
)
def test_bad_event_time_policy_is_named_by_path(doc: Doc, field: str, value: Any, fragment: str) -> None:
    kafka(doc)["event_time_policy"] = {field: value}
    path, message = only_issue(doc)
    assert path == f"spec.sources[1].event_time_policy.{field}"
    assert fragment in message, message
