"""SqliteJobStore: versioned job objects shared by processes, an event log, and a watch.

Two store instances on one file stand in for two processes (each has its own connection)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.master.store import (
    Conflict,
    JobExists,
    JobNotFound,
    JobRecord,
    SqliteJobStore,
    modify,
)

SPEC: dict[str, Any] = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "spec": {"data": "/d.yaml"}}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "jobs.sqlite"


@pytest.fixture
def store(path: Path) -> SqliteJobStore:
    return SqliteJobStore(path, poll_s=0.01)


@pytest.fixture
def other(path: Path, store: SqliteJobStore) -> SqliteJobStore:
    """A second writer on the same file: another process, as far as SQLite is concerned."""
    return SqliteJobStore(path, poll_s=0.01)


# --- objects -------------------------------------------------------------------------------------


def test_create_then_get_from_another_instance(store: SqliteJobStore, other: SqliteJobStore) -> None:
    before = time.time()
    created = store.create("a", SPEC, {"team": "ml"})
    assert (created.name, created.version, created.spec, created.desired, created.status) == (
        "a",
        1,
        SPEC,
        {},
        {},
    )
    assert created.labels == {"team": "ml"}
    assert before <= created.created <= time.time()
    assert other.get("a") == created


def test_the_store_file_and_its_folder_are_created(path: Path) -> None:
    assert not path.parent.exists()
    SqliteJobStore(path)
    assert path.is_file()


def test_find_filters_by_every_label(store: SqliteJobStore) -> None:
    store.create("b", SPEC, {"team": "ml", "env": "dev"})
    store.create("a", SPEC, {"team": "ml", "env": "prod"})
    store.create("c", SPEC)
    assert [r.name for r in store.find()] == ["a", "b", "c"]
    assert [r.name for r in store.find({"team": "ml"})] == ["a", "b"]
    assert [r.name for r in store.find({"team": "ml", "env": "dev"})] == ["b"]
    assert store.find({"team": "data"}) == []


def test_a_second_job_of_the_same_name_is_refused(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    with pytest.raises(JobExists, match="a job named 'a' already exists"):
        other.create("a", {"something": "else"})
    assert store.get("a").spec == SPEC


def test_an_unknown_job_is_not_found(store: SqliteJobStore) -> None:
    with pytest.raises(JobNotFound) as exc:
        store.get("ghost")
    assert str(exc.value) == "no job named 'ghost'"
    assert isinstance(exc.value, KeyError)
    with pytest.raises(JobNotFound):
        store.update("ghost", 1, status={"phase": "Running"})


def test_update_bumps_the_version_and_changes_only_the_named_part(store: SqliteJobStore) -> None:
    store.create("a", SPEC)
    first = store.update("a", 1, status={"phase": "Running"})
    assert (first.version, first.status, first.desired) == (2, {"phase": "Running"}, {})
    second = store.update("a", 2, desired={"suspend": True})
    assert (second.version, second.status, second.desired) == (3, {"phase": "Running"}, {"suspend": True})
    both = store.update("a", 3, status={"phase": "Suspended"}, desired={})
    assert (both.version, both.status, both.desired) == (4, {"phase": "Suspended"}, {})
    assert both.spec == SPEC  # the spec is never changed by an update
    assert store.get("a") == both


def test_a_stale_version_is_a_conflict(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    mine, theirs = store.get("a"), other.get("a")
    other.update("a", theirs.version, desired={"scale": {"data": 3}})
    with pytest.raises(Conflict, match="job 'a' is at version 2, not 1"):
        store.update("a", mine.version, desired={"stop": True})
    record = store.get("a")
    assert (record.version, record.desired) == (2, {"scale": {"data": 3}})  # nothing overwritten


# --- modify ----------------------------------------------------------------------------------------


def test_modify_retries_through_a_conflict(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    seen: list[int] = []

    def add_stop(record: JobRecord) -> dict[str, Any]:
        seen.append(record.version)
        if len(seen) == 1:  # another writer gets in between this read and the write
            other.update("a", record.version, desired={**record.desired, "scale": {"data": 2}})
        return {**record.desired, "stop": True}

    record = modify(store, "a", add_stop)
    assert seen == [1, 2]
    assert record.version == 3
    assert record.desired == {"scale": {"data": 2}, "stop": True}  # both writes kept


def test_modify_writes_status_when_asked(store: SqliteJobStore) -> None:
    store.create("a", SPEC)
    store.update("a", 1, desired={"suspend": True})
    record = modify(store, "a", lambda r: {"phase": "Suspended"}, part="status")
    assert (record.version, record.status, record.desired) == (3, {"phase": "Suspended"}, {"suspend": True})


def test_modify_gives_up_on_endless_conflicts(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)

    def always_beaten(record: JobRecord) -> dict[str, Any]:
        other.update("a", record.version, desired={"n": record.version})
        return {}

    with pytest.raises(Conflict, match="too many concurrent writers"):
        modify(store, "a", always_beaten)


# --- watch -----------------------------------------------------------------------------------------


def test_watch_returns_when_another_writer_updates(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    updated = threading.Event()

    def write() -> None:
        time.sleep(0.05)
        other.update("a", 1, status={"phase": "Running"})
        updated.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        record = store.watch("a", since_version=1, timeout_s=10.0)
    finally:
        writer.join()
    assert updated.is_set()
    assert record is not None and (record.version, record.status) == (2, {"phase": "Running"})


def test_watch_returns_at_once_when_the_record_is_already_newer(store: SqliteJobStore) -> None:
    store.create("a", SPEC)
    store.update("a", 1, desired={"stop": True})
    started = time.monotonic()
    record = store.watch("a", since_version=1, timeout_s=10.0)
    assert record is not None and record.version == 2
    assert time.monotonic() - started < 5.0


def test_watch_times_out_with_none(store: SqliteJobStore) -> None:
    store.create("a", SPEC)
    started = time.monotonic()
    assert store.watch("a", since_version=1, timeout_s=0.2) is None
    assert time.monotonic() - started >= 0.2


# --- events ----------------------------------------------------------------------------------------


def test_events_are_appended_in_order_and_paged(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    store.create("b", SPEC)
    written = []
    for i in range(5):
        written.append(store.add_event("a", "Tick", f"a{i}", executor=f"data-{i}", data={"i": i}))
        other.add_event("b", "Tock", f"b{i}")
    events = other.events("a")
    assert [e.message for e in events] == ["a0", "a1", "a2", "a3", "a4"]
    assert events == written  # what was written is what is read back, from another instance
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    assert events[2].executor == "data-2" and events[2].data == {"i": 2} and events[2].job == "a"
    assert [e.message for e in store.events("a", after=events[1].seq, limit=2)] == ["a2", "a3"]
    assert [e.message for e in store.events("a", after=events[3].seq)] == ["a4"]
    assert store.events("a", after=events[4].seq) == []
    assert [e.message for e in store.events("b")] == ["b0", "b1", "b2", "b3", "b4"]


def test_an_event_as_a_dict(store: SqliteJobStore) -> None:
    event = store.add_event("a", "Submitted", "job 'a' submitted")
    assert event.to_dict() == {
        "seq": event.seq,
        "time": event.t,
        "type": "Submitted",
        "executor": None,
        "message": "job 'a' submitted",
        "data": {},
    }


# --- delete ----------------------------------------------------------------------------------------


def test_delete_removes_the_job_and_its_events(store: SqliteJobStore, other: SqliteJobStore) -> None:
    store.create("a", SPEC)
    store.create("b", SPEC)
    store.add_event("a", "Submitted", "a")
    store.add_event("b", "Submitted", "b")
    other.delete("a")
    with pytest.raises(JobNotFound):
        store.get("a")
    assert store.events("a") == []
    assert [r.name for r in store.find()] == ["b"]
    assert [e.message for e in store.events("b")] == ["b"]
    store.create("a", SPEC)  # the name is free again, with a fresh history
    assert store.get("a").version == 1 and store.events("a") == []
