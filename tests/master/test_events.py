"""Events from outside the master's loop (a backend's watchdog, a trainer's report) are written in
order by the loop, and none is lost: not while the store is away, not when one's payload is off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.store import Event, SqliteJobStore

SPEC: dict[str, Any] = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "spec": {"data": "/d.yaml"}}


class Flaky(SqliteJobStore):
    """A real store whose event writes fail while ``away`` (a control plane restarting)."""

    away = False

    def add_event(self, *args: Any, **kwargs: Any) -> Event:
        if self.away:
            raise ConnectionError("the store is away")
        return super().add_event(*args, **kwargs)


@pytest.fixture
def store(tmp_path: Path) -> Flaky:
    store = Flaky(tmp_path / "jobs.sqlite", poll_s=0.01)
    store.create("job", SPEC)
    return store


def test_queued_events_wait_for_the_store_and_keep_their_order(store: Flaky) -> None:
    log = EventLog(store, "job")
    for i in range(3):
        log.queue("ExecutorFailed", f"failure {i}", "data-0", {"reason": str(i)})
    store.away = True
    with pytest.raises(ConnectionError):
        log.flush()
    log.queue("ExecutorFailed", "failure 3", "data-0", {"reason": "3"})
    store.away = False
    log.flush()
    assert [e.message for e in store.events("job")] == [f"failure {i}" for i in range(4)]


def test_an_event_whose_payload_does_not_fit_is_kept_as_it_came(store: Flaky) -> None:
    log = EventLog(store, "job")
    log.queue("ExecutorLaunched", "trainer-0 launched", "trainer-0", {"cpu": "lots"})  # no memory either
    log.queue("ExecutorFailed", "after it", "data-0", {"reason": "x"})
    log.flush()
    assert [(e.type, e.message, e.data) for e in store.events("job")] == [
        ("ExecutorLaunched", "trainer-0 launched", {"cpu": "lots"}),
        ("ExecutorFailed", "after it", {"reason": "x"}),
    ]
