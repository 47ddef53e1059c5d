"""The stream block of a job's status says what the stream's broker is doing now: refreshed with
every trainer report while no step is trained, and a broker never reached counts as an outage. Real
masters, real trainer processes, a real broker of the test's own, stopped and started."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.store import JobRecord, SqliteJobStore
from tests.master.conftest import JobWorld, _stop_everything, write_world
from tests.master.test_master import running, until
from tests.training.conftest import T0, OwnBroker, events, history_source, own_broker, to_json

pytestmark = pytest.mark.timeout(360)

HISTORY_ROWS, STREAM_ROWS, TOPIC = 400, 200, "clicks"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[OwnBroker]:
    with own_broker(tmp_path / "kafka") as b:
        yield b


@pytest.fixture
def small_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: OwnBroker) -> Iterator[JobWorld]:
    """One hour of history (a few steps' worth) and a topic on the test's own broker, mixed and
    followed: once both are trained the trainer idles, reporting, until the job is stopped."""
    write_world(tmp_path, hours=1, per_file=HISTORY_ROWS)
    data = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "history"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()},
            "sources": [history_source(tmp_path)],
        },
    }
    data_path = tmp_path / "data.yaml"
    data_path.write_text(yaml.safe_dump(data))
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {"mode": "batch", "batch_size": 50, "mixing": {"freshness": {"clock": "wall"}}},
    }
    training_path = tmp_path / "training.yaml"
    training_path.write_text(yaml.safe_dump(training))
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    store = SqliteJobStore(home / "jobs.sqlite")
    world = JobWorld(tmp_path, HISTORY_ROWS, data_path, training_path, store, home)
    world.add_stream(broker.bootstrap_servers, TOPIC, (0.5, 0.5), priority=0)
    try:
        yield world
    finally:
        _stop_everything(store)


def _stream(record: JobRecord) -> dict[str, Any]:
    return ((record.status.get("progress") or {}).get("trainer_metrics") or {}).get("stream") or {}


def _trained(record: JobRecord) -> dict[str, int]:
    return ((record.status.get("progress") or {}).get("trainer_metrics") or {}).get("rows_trained") or {}


def _step(record: JobRecord) -> int | None:
    return (record.status.get("progress") or {}).get("trainer_step")


def _events(world: JobWorld, type_: str) -> list[dict[str, Any]]:
    return [e.data or {} for e in world.store.events("job") if e.type == type_]


def test_a_broker_stopped_while_the_trainer_idles_shows_in_the_live_status(
    small_world: JobWorld, broker: OwnBroker
) -> None:
    """Everything is trained and the trainer waits for more events; then the broker stops. No step
    is trained from then on, yet the status's stream block turns ``available: false`` with the
    outage counted within a few reports: it is the stream's state now, not the last step's."""
    broker.start()
    broker.topic(TOPIC, to_json(events(HISTORY_ROWS, STREAM_ROWS, T0, seed=3)))
    submit(small_world.job(follow=True), store=small_world.store)
    with running(small_world):
        record = until(
            small_world,
            lambda r: (
                _trained(r) == {"history": HISTORY_ROWS, "events": STREAM_ROWS}
                and _stream(r).get("available") is True
            ),
            timeout_s=240,
        )
        idle_at = _step(record)
        broker.stop()
        # Noticed within NOT_REACHED_S (the next probe, then its timeout), shown by the next report.
        record = until(small_world, lambda r: _stream(r).get("available") is False, timeout_s=60)
        stream = _stream(record)
        assert stream["outages"] >= 1 and stream["last_error"], stream
        assert _step(record) == idle_at  # no step was trained to refresh it
        assert _events(small_world, "StreamUnavailable")


def test_a_broker_down_before_the_job_starts_is_an_outage_until_it_is_reached(
    small_world: JobWorld, broker: OwnBroker
) -> None:
    """The broker holds the topic but is down when the job starts: the history trains meanwhile,
    and the job says so — a ``StreamUnavailable`` event and ``available: false`` — until the broker
    is started, then ``StreamRecovered``, ``available: true``, and the stream's rows are trained.

    The trainer takes its first step only once it has judged the stream unable to serve (never
    reached within the grace, as a broker that stops answering mid-run is judged): the first status
    with a step must already say so."""
    broker.start()
    broker.topic(TOPIC, to_json(events(HISTORY_ROWS, STREAM_ROWS, T0, seed=3)))
    broker.stop()
    submit(small_world.job(follow=True), store=small_world.store)
    with running(small_world):
        record = until(small_world, lambda r: bool(_step(r)) and bool(_stream(r)), timeout_s=240)
        assert _stream(record)["available"] is False and _stream(record)["outages"] == 1, _stream(record)
        until(small_world, lambda r: bool(_events(small_world, "StreamUnavailable")), timeout_s=30)
        # Declared by the grace, not when the client's own first connection gives up (later).
        (unavailable,) = _events(small_world, "StreamUnavailable")
        assert "not reached within" in unavailable["error"], unavailable
        record = until(small_world, lambda r: _trained(r).get("history") == HISTORY_ROWS, timeout_s=240)
        assert _stream(record)["available"] is False and not _trained(record).get("events")
        assert not _events(small_world, "StreamRecovered")
        broker.start()
        record = until(
            small_world,
            lambda r: _trained(r).get("events") == STREAM_ROWS and _stream(r).get("available") is True,
            timeout_s=240,
        )
        (recovered,) = _events(small_world, "StreamRecovered")
        assert recovered["source"] == "events" and recovered["outage_s"] > 0
        assert len(_events(small_world, "StreamUnavailable")) == 1
