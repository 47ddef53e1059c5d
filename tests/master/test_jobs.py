"""Submitting a job: the job document and the documents it references are validated together, paths
are resolved against the job file, and a submitted job gets a token and a home under PRIMUS_HOME."""

from __future__ import annotations

import copy
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.master.jobs import job_paths, load_job, read_token, submit
from airflow_provider_primus.master.store import JobExists, JobNotFound, SqliteJobStore
from tests.training.conftest import SCHEMA, T0

Doc = dict[str, Any]


def files_source(name: str = "history", root: str = "/data/store") -> Doc:
    return {
        "name": name,
        "type": "files",
        "format": "parquet",
        "uri": f"file://{root}",
        "path_template": "{date}/{hour}",
        "granularity": "hour",
        "schema": copy.deepcopy(SCHEMA),
    }


def kafka_source(name: str = "events") -> Doc:
    return {
        "name": name,
        "type": "kafka",
        "bootstrap_servers": "127.0.0.1:9092",
        "topic": name,
        "event_time_field": "ts",
        "start": {"policy": "earliest"},
        "schema": copy.deepcopy(SCHEMA),
    }


def data_document(*sources: Doc, window: bool = True) -> Doc:
    """Like tests/master/conftest.py's data document; nothing here reads the files."""
    spec: Doc = {
        "planning": {"target_rows_per_task": 2000, "min_rows_per_task": 1000},
        "sources": list(sources) or [files_source()],
    }
    if window:
        spec["window"] = {"start": T0.isoformat(), "end": (T0 + timedelta(hours=4)).isoformat()}
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "history"},
        "spec": spec,
    }


TRAINING: Doc = {
    "apiVersion": "primus.dev/v1alpha1",
    "kind": "PrimusTraining",
    "metadata": {"name": "t"},
    "spec": {"mode": "batch", "batch_size": 20},
}


def job_document(name: str = "job", **spec: Any) -> Doc:
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": name},
        "spec": {"data": "../specs/data.yaml", "training": "../specs/training.yaml", **spec},
    }


def write(path: Path, document: Doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    """``specs/`` holds the data and training documents; job files go to ``jobs/`` next to it."""
    folder = tmp_path / "specs"
    write(folder / "data.yaml", data_document())
    write(folder / "training.yaml", TRAINING)
    (tmp_path / "jobs").mkdir()
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    return home


def refused(document: Doc, base: Path) -> dict[str, str]:
    """path → message for every issue; fails the test if the job loads."""
    with pytest.raises(SpecError) as exc:
        load_job(document, base)
    found = {i.path: i.message for i in exc.value.issues}
    assert len(found) == len(exc.value.issues), f"two issues share a path: {exc.value}"
    return found


# --- load_job --------------------------------------------------------------------------------------


def test_paths_are_resolved_against_the_job_file_and_stored_absolute(
    specs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(specs.parent.parent)  # anywhere but the job's folder
    job, stored = load_job(job_document(), tmp_path / "jobs")
    assert job.spec.data == "../specs/data.yaml"  # the model keeps what was written
    assert stored["spec"]["data"] == str((specs / "data.yaml").resolve())
    assert stored["spec"]["training"] == str((specs / "training.yaml").resolve())
    assert Path(stored["spec"]["data"]).is_absolute()
    # A v1alpha1 document is stored at the newest version (contracts/versions.py).
    assert stored["apiVersion"] == "primus.dev/v1beta1" and stored["metadata"] == {"name": "job"}
    assert "evaluator" not in stored["spec"]["roles"]  # unset optionals are left out


def test_without_a_training_document_the_defaults_are_used(specs: Path) -> None:
    # The embedded defaults train in mode mixed, which needs a stream next to the files.
    write(specs / "hybrid.yaml", data_document(files_source(), kafka_source()))
    document = job_document(data="hybrid.yaml")
    del document["spec"]["training"]
    job, stored = load_job(document, specs)
    assert job.spec.training is None and "training" not in stored["spec"]


def test_a_missing_data_document_is_named(specs: Path) -> None:
    found = refused(job_document(data="absent.yaml"), specs)
    assert found == {"spec.data": f"{(specs / 'absent.yaml').resolve()}: no such file"}


def test_a_broken_data_document_is_reported_under_spec_data(specs: Path) -> None:
    broken = data_document()
    source = broken["spec"]["sources"][0]
    source["path_templte"] = source.pop("path_template")
    write(specs / "broken.yaml", broken)
    with pytest.raises(SpecError) as exc:
        load_job(job_document(data="broken.yaml", training="training.yaml"), specs)
    assert {(i.path, i.message) for i in exc.value.issues} == {
        ("spec.data", "spec.sources[0].path_template: required field is missing"),
        ("spec.data", "spec.sources[0].path_templte: unknown field; did you mean 'path_template'?"),
    }


def test_a_broken_training_document_is_reported_under_spec_training(specs: Path) -> None:
    write(specs / "bad-training.yaml", {**TRAINING, "spec": {"batch_size": 0}})
    found = refused(job_document(data="data.yaml", training="bad-training.yaml"), specs)
    assert found == {"spec.training": "spec.batch_size: must be greater than 0"}


def test_several_files_and_kafka_sources_are_one_job(specs: Path) -> None:
    """Two files sources and two topics: the job reads them all, mixed (no training document:
    the defaults, mode mixed, freshness watching the highest-priority topic)."""
    sources = [files_source("history"), files_source("more", "/data/more"), kafka_source("clicks")]
    data = data_document(*sources, kafka_source("views"))
    data["spec"]["mixture"] = [{"source": "views", "weight": 1.0, "priority": 2}]
    write(specs / "four.yaml", data)
    document = job_document(data="four.yaml")
    del document["spec"]["training"]
    job, _ = load_job(document, specs)
    assert job.spec.training is None


def test_a_freshness_source_that_is_no_topic_is_refused_with_its_path(specs: Path) -> None:
    sources = [files_source("history"), files_source("more", "/data/more"), kafka_source("clicks")]
    write(specs / "three.yaml", data_document(*sources))
    mixed = {**TRAINING, "spec": {"mode": "mixed", "mixing": {"freshness": {"source": "more"}}}}
    write(specs / "fresh.yaml", mixed)
    found = refused(job_document(data="three.yaml", training="fresh.yaml"), specs)
    assert found == {
        "spec.training": "spec.mixing.freshness.source: 'more' is not a kafka source (kafka sources: clicks)"
    }


def test_a_files_source_without_a_window_needs_follow(specs: Path) -> None:
    write(specs / "open.yaml", data_document(window=False))
    found = refused(job_document(data="open.yaml", training="training.yaml"), specs)
    assert found == {"spec.data": "the data document needs spec.window (the historical window)"}
    load_job(job_document(data="open.yaml", training="training.yaml", follow=True), specs)


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"roles": {"evaluator": {}}}, "spec.roles.evaluator", "not supported yet"),
        ({"backend": {"type": "kubernetes"}}, "spec.backend.type", "submitted to the local job store"),
    ],
)
def test_what_the_local_backend_cannot_run_is_refused(specs: Path, spec: Doc, path: str, words: str) -> None:
    found = refused(job_document(data="data.yaml", training="training.yaml", **spec), specs)
    assert list(found) == [path]
    assert words in found[path]


def test_every_submission_problem_is_reported_at_once(specs: Path) -> None:
    write(
        specs / "two.yaml",
        data_document(files_source("history"), files_source("more", "/data/more"), window=False),
    )
    spec: Doc = {
        "roles": {"trainer": {"replicas": {"min": 2}}, "evaluator": {}},
        "backend": {"type": "kubernetes"},
    }
    found = refused(job_document(data="two.yaml", training="training.yaml", **spec), specs)
    assert set(found) == {
        "spec.data",
        "spec.roles.evaluator",
        "spec.backend.type",
    }


def test_an_invalid_job_document_is_refused_before_its_references_are_read(specs: Path) -> None:
    found = refused(job_document(data="absent.yaml", rols={}), specs)
    assert found == {"spec.rols": "unknown field; did you mean 'roles'?"}


# --- submit ----------------------------------------------------------------------------------------


def test_submit_stores_the_job_and_gives_it_a_private_token(specs: Path, home: Path, tmp_path: Path) -> None:
    path = write(tmp_path / "jobs" / "job.yaml", job_document())
    record = submit(path, labels={"team": "ml"})
    store = SqliteJobStore()  # the default store: PRIMUS_HOME/jobs.sqlite
    assert store.path == home / "jobs.sqlite"
    assert store.get("job") == record
    assert (record.name, record.version, record.labels) == ("job", 1, {"team": "ml"})
    assert record.spec["spec"]["data"] == str((specs / "data.yaml").resolve())
    token = home / "jobs" / "job" / "token"
    assert job_paths("job").token == token
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600
    assert len(read_token("job")) >= 32
    assert read_token("job") == token.read_text()
    events = store.events("job")
    assert [(e.type, e.message) for e in events] == [("Submitted", "job 'job' submitted")]


def test_two_jobs_get_different_tokens(specs: Path, home: Path, tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "store.sqlite")
    submit(write(tmp_path / "jobs" / "a.yaml", job_document("a")), store=store)
    submit(write(tmp_path / "jobs" / "b.yaml", job_document("b")), store=store)
    assert read_token("a") != read_token("b")
    assert [r.name for r in store.find()] == ["a", "b"]


def test_a_second_job_of_the_same_name_is_refused(specs: Path, home: Path, tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "store.sqlite")
    path = write(tmp_path / "jobs" / "job.yaml", job_document())
    submit(path, store=store)
    token = read_token("job")
    again = write(tmp_path / "jobs" / "again.yaml", job_document(follow=True))
    with pytest.raises(JobExists, match="a job named 'job' already exists"):
        submit(again, store=store)
    assert read_token("job") == token  # the running job's token is untouched
    assert store.get("job").spec["spec"]["follow"] is False
    assert [e.type for e in store.events("job")] == ["Submitted"]


def test_an_invalid_job_leaves_nothing_behind(specs: Path, home: Path, tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "store.sqlite")
    path = write(tmp_path / "jobs" / "job.yaml", job_document(backend={"type": "kubernetes"}))
    with pytest.raises(SpecError):
        submit(path, store=store)
    with pytest.raises(JobNotFound):
        store.get("job")
    assert not job_paths("job").root.exists()


def test_submit_with_an_explicit_home(specs: Path, home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    store = SqliteJobStore(tmp_path / "store.sqlite")
    submit(write(tmp_path / "jobs" / "job.yaml", job_document()), store=store, home=elsewhere)
    assert (elsewhere / "jobs" / "job" / "token").is_file()
    assert read_token("job", elsewhere)
    assert not (home / "jobs").exists()
