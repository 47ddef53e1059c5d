"""An executor's end says why, and what retrying cannot fix is not retried: real masters, real
trainer processes, the real broker.

A trainer that ends on an exception leaves it (one line) beside its exit code; the master puts it in
the ExecutorFailed event and the job's failure message, which the Airflow operator prints. An error
marked ``TerminalError`` (a stream offset lost under ``offset_reset: fail``) exits with
``EXIT_TERMINAL`` and fails the job at once, without spending the trainer's restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.process import EXIT_TERMINAL
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, executor, running, until
from tests.training.conftest import T0, events, to_json

pytestmark = pytest.mark.timeout(360)


def _failed(world: JobWorld) -> list[tuple[str, dict[str, Any]]]:
    return [(e.message, e.data or {}) for e in world.store.events("job") if e.type == "ExecutorFailed"]


def _launches(world: JobWorld, name: str) -> int:
    return sum(1 for e in world.store.events("job") if e.type == "ExecutorLaunched" and e.executor == name)


def _commit(bootstrap: str, topic: str, group: str, offset: int) -> None:
    consumer: Any = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="primus-tests")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def test_a_stream_offset_lost_under_fail_fails_the_job_at_once_saying_why(
    job_world: JobWorld, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """The trainer resumes the topic at the group's committed offset, which the log no longer holds
    (500 of 100 records), under ``offset_reset: fail``: every restart would meet the same lost
    offset, so the job fails after the first attempt with the trainer's own error."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = new_topic("lost")
    produce(bootstrap, topic, to_json(events(job_world.rows, 100, T0, seed=3)))
    data = job_world.add_stream(bootstrap, topic, (0.5, 0.5), priority=0)
    (stream,) = [s for s in data["spec"]["sources"] if s["name"] == "events"]
    stream["start"] = {"policy": "committed"}  # offset_reset stays the default: fail
    job_world.data_path.write_text(yaml.safe_dump(data))
    _commit(bootstrap, topic, stream["group_id"], 500)
    submit(job_world.job(), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    status = record.status
    assert status["phase"] == "Failed", status["message"]
    message = status["message"]
    assert message.startswith("trainer-0 failed, not retried"), message
    assert "StreamOffsetLost: stream events: cannot resume" in message
    assert "set offset_reset: earliest or latest" in message
    trainer = executor(record, "trainer-0")
    assert (trainer["restarts"], trainer["incarnation"], trainer["exit_code"]) == (0, 0, EXIT_TERMINAL)
    assert trainer["error"].startswith("StreamOffsetLost: ")
    assert _launches(job_world, "trainer-0") == 1  # one attempt, not 1 + max_restarts
    ((event, data_),) = _failed(job_world)
    assert "StreamOffsetLost" in event and "not restarted" in event
    assert data_["terminal"] is True and data_["error"] == trainer["error"]


def test_a_retryable_failure_spends_its_restarts_and_the_status_says_why(job_world: JobWorld) -> None:
    """The trainer cannot open its trace file (a directory is in the way): not marked terminal, so it
    is restarted up to ``max_restarts``; the failure message ends with its error, not only with
    "exited with code 1"."""
    job = job_world.job(
        roles={
            "data": {"resources": {"cpu": 1, "memory": "1Gi"}},
            "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}, "failover": {"max_restarts": 1}},
        }
    )
    submit(job, store=job_world.store)
    (job_world.home / "jobs" / "job" / "trace.jsonl").mkdir(parents=True)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    status = record.status
    assert status["phase"] == "Failed", status["message"]
    last = "trainer-0 failed 2 times; last: exited with code 1: IsADirectoryError:"
    assert status["message"].startswith(last), status["message"]
    assert "trace.jsonl" in status["message"]
    assert _launches(job_world, "trainer-0") == 2
    failures = _failed(job_world)
    assert len(failures) == 1  # the restart's; the second failure is the job's
    assert "restarting" in failures[0][0] and "IsADirectoryError" in failures[0][0]
    assert failures[0][1]["error"].startswith("IsADirectoryError: ")
    assert executor(record, "trainer-0")["error"].startswith("IsADirectoryError: ")
