"""A job whose data document has a python transform: its function imported at submit in the job's
environment (refused by field when it does not import, nothing launched), and run by the data
executors on files and by the trainer's stream decoder on Kafka, the same features reaching the
trainer from both."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.contracts import SpecError, load_data_spec
from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.data.tensors import to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.user_code import ExecutorPython, user_transform_issues
from tests.example_package import build_wheel, example_project
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, running, until
from tests.training.conftest import SCHEMA, T0, events, to_json

pytestmark = pytest.mark.timeout(300)
TESTS = Path(__file__).resolve().parents[2]
EXAMPLE = TESTS / "docs" / "examples" / "two_tower" / "src"
FUNCTION = "two_tower.features:time_and_price"
FEATURES: dict[str, Any] = {
    **SCHEMA,
    "sparse": ["user_id", "item_id", "hour_of_day"],
    "dense": ["log_price"],
    "transforms": [
        {
            "type": "python",
            "function": FUNCTION,
            "inputs": ["price"],
            "outputs": ["hour_of_day", "log_price"],
        },
        *SCHEMA["transforms"],
        {"column": "hour_of_day", "hash_bucket": 24},
    ],
}


@pytest.fixture(autouse=True)
def _on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' helpers importable by children (the example package is not: a job names its folder
    in backend.local.paths)."""
    monkeypatch.setenv("PYTHONPATH", ":".join([str(TESTS), *sys.path]))


def _schema(world: JobWorld, schema: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(world.data_path.read_text())
    for source in data["spec"]["sources"]:
        source["schema"] = schema
    world.data_path.write_text(yaml.safe_dump(data))
    return data


def test_submit_refuses_a_transform_that_does_not_import_and_launches_nothing(job_world: JobWorld) -> None:
    step = {"type": "python", "function": "acme.features:derive"}
    _schema(job_world, {**SCHEMA, "transforms": [*SCHEMA["transforms"], step]})
    with pytest.raises(SpecError) as raised:
        submit(job_world.job(), store=job_world.store)
    assert str(raised.value) == (
        "spec.data: spec.sources[0].schema.transforms[2].function: cannot import 'acme.features': "
        "ModuleNotFoundError: No module named 'acme'"
    )
    assert job_world.store.find() == []


def test_validate_imports_the_function_in_the_jobs_environment(
    job_world: JobWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    _schema(job_world, FEATURES)
    without = job_world.job("without")
    assert main(["validate", str(without)]) == 2
    assert capsys.readouterr().err.splitlines()[1:] == [
        "spec.data: spec.sources[0].schema.transforms[0].function: cannot import 'two_tower.features': "
        "ModuleNotFoundError: No module named 'two_tower'"
    ]
    with_paths = job_world.job("with", backend={"local": {"paths": [str(EXAMPLE)]}})
    assert main(["validate", str(with_paths)]) == 0


def _recorded(path: Path) -> Counter[str]:
    return Counter(json.dumps(json.loads(line)) for line in path.read_text().splitlines())


def _expected(tables: list[Any]) -> Counter[str]:
    """What the files path computes for these raw rows: BatchTransformer, as a data executor runs it."""
    transformer = BatchTransformer(SourceSchema.model_validate(FEATURES))
    out: Counter[str] = Counter()
    for table in tables:
        for batch in table.combine_chunks().to_batches():
            t = to_tensors(transformer(batch), sparse=FEATURES["sparse"], dense=FEATURES["dense"])
            out.update(json.dumps(row) for row in zip(t.sparse.tolist(), t.dense.tolist(), strict=True))
    return out


def test_files_and_stream_bring_the_functions_features_to_the_trainer_alike(
    job_world: JobWorld, kafka_broker: Any, new_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream carries the first hour's rows again, as JSON: each of their feature rows must reach
    the model twice, once from its Parquet file (data executors) and once from Kafka (the trainer's
    decoder), with the very IDs and values the function and the schema's steps give them."""
    topic = new_topic("python-transform-job")
    first_hour = events(0, 5000, T0, seed=0)  # tests/master/conftest.py's hour 0, row for row
    produce(kafka_broker.bootstrap_servers, topic, to_json(first_hour))
    job_world.add_stream(kafka_broker.bootstrap_servers, topic, (0.8, 0.2), priority=0)
    _schema(job_world, FEATURES)
    record = job_world.root / "features.jsonl"
    training = yaml.safe_load(job_world.training_path.read_text())
    training["apiVersion"] = "primus.dev/v1beta1"
    training["spec"]["batch_size"] = 200
    training["spec"]["model"] = {
        "type": "python",
        "entrypoint": "tests.master.feature_recorder:build",
        "options": {"record": str(record)},
    }
    job_world.training_path.write_text(yaml.safe_dump(training))
    submit(job_world.job(backend={"local": {"paths": [str(EXAMPLE)]}}), store=job_world.store)
    with running(job_world):
        status = until(job_world, ended, timeout_s=240).status
    assert status["phase"] == "Succeeded", status["message"]

    monkeypatch.syspath_prepend(str(EXAMPLE))  # this process computes the expectation
    files = [pq.read_table(p) for p in sorted((job_world.root / "store").rglob("*.parquet"))]
    assert files[0].equals(first_hour)
    from_files, from_stream = _expected(files), _expected([first_hour])
    assert sum(from_files.values()) == job_world.rows
    recorded = _recorded(record)
    assert recorded == from_files + from_stream
    assert all(recorded[row] >= 2 for row in from_stream)  # the stream's rows, twice


def test_the_function_is_imported_from_the_examples_wheel_on_the_import_path(
    job_world: JobWorld, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a YARN job ships it (backend.yarn.wheels) or a local one names it: the built wheel, zipped,
    on the executors' import path."""
    wheel = build_wheel(example_project(job_world.root / "build"))
    _schema(job_world, FEATURES)
    job = job_world.job(backend={"local": {"paths": [str(wheel)]}})
    assert main(["validate", str(job)]) == 0, capsys.readouterr().err


def test_in_an_image_a_function_this_machine_cannot_import_is_left_to_the_executors(
    job_world: JobWorld,
) -> None:
    step = {"type": "python", "function": "acme.features:derive"}
    _schema(job_world, {**SCHEMA, "transforms": [*SCHEMA["transforms"], step]})
    data = load_data_spec(job_world.data_path)
    assert user_transform_issues(data, ExecutorPython(), in_image=True) == []
    [issue] = user_transform_issues(data, ExecutorPython(), in_image=False)
    assert issue.path == "spec.data" and "No module named 'acme'" in issue.message
