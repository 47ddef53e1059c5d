"""A job's data-parallel trainers: one group sharing the data service, exactly once through a
trainer's kill and a change of their count at a checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psutil
import pytest
import yaml

from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import read_token, start_master, submit
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord, modify
from airflow_provider_primus.resources.backend import Handle, LaunchRequest
from airflow_provider_primus.resources.local import LocalBackend
from tests.master.conftest import JobWorld, trace_rows_of_group
from tests.master.test_master import ended, event_types, executor, running, slowed, until
from tests.training.conftest import T0, events, to_json

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(autouse=True)
def _steps_for_two(job_world: JobWorld) -> None:
    """40 rows per trainer step (the world's training document has 20): two trainers then take as
    many steps for the pass as one trainer does there, each step being a round of collectives."""
    training = yaml.safe_load(job_world.training_path.read_text())
    training["spec"]["batch_size"] = 40
    job_world.training_path.write_text(yaml.safe_dump(training))


def _ended(world: JobWorld) -> JobRecord:
    return until(world, ended, timeout_s=300)


def group(initial: int, top: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        # Small batches and a small read-ahead: the executors hold little when a group restarts.
        "data_service": {"batch_rows": 500, "window": 2},
        "roles": {
            "data": {"resources": {"cpu": "500m", "memory": "1Gi"}},
            "trainer": {
                "replicas": {"min": 1, "initial": initial, "max": top},
                "resources": {"cpu": 1, "memory": "2Gi"},
            },
        },
        **spec,
    }


def assert_every_row_once(world: JobWorld) -> None:
    rows = trace_rows_of_group(world.home)
    assert len(rows) == world.rows, f"{len(rows)} rows trained, {world.rows} planned"
    assert sorted(rows) == list(range(world.rows))


def test_two_trainers_share_the_pass_and_train_every_row_once(job_world: JobWorld) -> None:
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world):
        record = _ended(job_world)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert_every_row_once(job_world)
    root = job_world.home / "jobs" / "job"
    assert (root / "trace.jsonl.rank0").stat().st_size and (root / "trace.jsonl.rank1").stat().st_size
    assert record.status["master"]["trainer_generation"] == 1
    assert event_types(job_world).count("TrainersRegrouped") == 1


def test_a_killed_trainer_restarts_the_group_from_its_checkpoint_exactly(job_world: JobWorld) -> None:
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
            before = job_world.store.get("job")
            os.kill(executor(before, "trainer-1")["handle"]["ref"]["pid"], signal.SIGKILL)
            until(job_world, lambda r: r.status["master"]["trainer_generation"] == 2)
        record = _ended(job_world)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    # One failure of the group, charged to the trainer seen failing first (trainer-0 may have failed
    # of its peer's death in the same pass); both were started again with the group.
    assert sum(executor(record, f"trainer-{i}")["restarts"] for i in (0, 1)) == 1
    assert [executor(record, f"trainer-{i}")["incarnation"] for i in (0, 1)] == [1, 1]
    # Both trainers resumed at the group's checkpoint: rows trained after it were trained again,
    # by whichever trainer claimed them, and none twice.
    assert_every_row_once(job_world)


def _group_started(world: JobWorld, master: Master, generation: int) -> JobRecord:
    """Wait for the group of ``generation`` to train, then slow its leader (and so the group) to a
    tenth of a core, so the test acts mid-pass for certain."""
    until(world, lambda r: (r.status.get("master") or {}).get("trainer_generation") == generation)
    until(world, lambda r: executor(r, "trainer-0")["state"] == "running")
    master.request({"resize": {"trainer-0": {"cpu": 0.1}}})
    return until(world, lambda r: executor(r, "trainer-0")["handle"]["allotment"]["cpu"] == 0.1)


def test_the_trainer_count_changes_at_a_checkpoint_and_every_row_is_trained_once(
    job_world: JobWorld,
) -> None:
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world) as master:
        _group_started(job_world, master, 1)
        until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
        ControlClient(master.api.url, read_token("job")).scale("trainer", 1)  # the control API
        record = _group_started(job_world, master, 2)
        assert executor(record, "trainer-1")["state"] == "removed"
        step = record.status["progress"].get("trainer_step") or 0
        until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > step + 30)
        master.request({"scale": {"trainer": 2}})
        _group_started(job_world, master, 3)
        master.request({"resize": {"trainer-0": {"cpu": 1.0}}})
        record = _ended(job_world)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    regroups = [e for e in job_world.store.events("job") if e.type == "TrainersRegrouped"]
    assert [(e.data["trainers"], e.data["reason"]) for e in regroups] == [
        (2, "start"),
        (1, "scale"),
        (2, "scale"),
    ]
    assert_every_row_once(job_world)


def test_two_trainers_share_files_and_stream_partitions_exactly_once_through_a_kill(
    job_world: JobWorld, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """Mixed mode: the files through the shared data service, the topic's two partitions one per
    trainer; a trainer killed mid-run, the group resumed from its checkpoint."""
    topic = new_topic("shared", partitions=2)
    stream_rows = 2000
    produce(kafka_broker.bootstrap_servers, topic, to_json(events(job_world.rows, stream_rows, T0, seed=9)))
    data = job_world.add_stream(kafka_broker.bootstrap_servers, topic, (0.75, 0.25), priority=0)
    data["spec"]["window"]["end"] = (T0 + timedelta(hours=4)).isoformat()
    job_world.data_path.write_text(yaml.safe_dump(data))
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
            os.kill(executor(job_world.store.get("job"), "trainer-1")["handle"]["ref"]["pid"], signal.SIGKILL)
            until(job_world, lambda r: r.status["master"]["trainer_generation"] == 2)
        record = _ended(job_world)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    rows = trace_rows_of_group(job_world.home)
    planned = job_world.rows + stream_rows
    assert len(rows) == planned, f"{len(rows)} rows trained, {planned} planned and produced"
    assert sorted(rows) == list(range(planned))
    root = job_world.home / "jobs" / "job"
    sources = [
        {row[0] for line in (root / f"trace.jsonl.rank{r}").read_text().splitlines() for row in _rows(line)}
        for r in (0, 1)
    ]
    assert sources == [{"history", "events"}] * 2  # both trainers trained files and their partition


def _rows(line: str) -> list[list[Any]]:
    try:
        rows: list[list[Any]] = json.loads(line)["rows"]
    except ValueError:
        return []  # the torn last line of a killed trainer
    return rows


@pytest.mark.parametrize(
    ("killed", "recorded"),
    [
        # one member ended while no master ran, the other recorded as being stopped
        ("trainer-0", {"trainer-1": {"state": "removing"}}),
        # one member recorded as gone (failed), the other still running and recorded so
        ("trainer-1", {"trainer-1": {"state": "removed", "exit_code": 1}}),
    ],
    ids=["lost-and-stopping", "gone-and-running"],
)
def test_a_master_restarted_into_a_broken_group_restarts_the_whole_group(
    job_world: JobWorld, killed: str, recorded: dict[str, dict[str, Any]]
) -> None:
    """What a master that died in the middle of restarting the group can leave. The next master
    stops what is left and starts the group again from its checkpoint; no trainer is started alone
    into a group that is gone, and none is left waiting for a peer that will not come (either would
    wait at the rendezvous until the group's timeout, and again)."""
    submit(job_world.job(**group(2)), store=job_world.store)
    start_master("job")
    record = until(job_world, lambda r: (r.status.get("progress", {}).get("trainer_step") or 0) > 0)
    slow = {"resize": {"trainer-0": {"cpu": 0.1}}, "resize_gen": 1}  # so that the kills land mid-pass
    modify(job_world.store, "job", lambda r: {**r.desired, **slow})
    record = until(job_world, lambda r: executor(r, "trainer-0")["handle"]["allotment"]["cpu"] == 0.1)
    record = until(job_world, lambda r: (r.status.get("progress", {}).get("trainer_step") or 0) > 40)
    first_master = record.status["master"]["pid"]
    os.kill(first_master, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        psutil.Process(first_master).wait(10)
    record = job_world.store.get("job")
    lost = executor(record, killed)["handle"]["ref"]["pid"]
    os.kill(lost, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        psutil.Process(lost).wait(10)

    def rewritten(status: dict[str, Any]) -> dict[str, Any]:
        status = json.loads(json.dumps(status))
        for name, fields in recorded.items():
            status["executors"][name].update(fields)
        return status

    modify(job_world.store, "job", lambda r: rewritten(r.status), part="status")
    generation = record.status["master"]["trainer_generation"]
    with running(job_world):
        record = _ended(job_world)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    regroups = [e for e in job_world.store.events("job") if e.type == "TrainersRegrouped"]
    assert [(e.data["generation"], e.data["reason"]) for e in regroups] == [
        (generation, "start"),
        (generation + 1, "failure"),
    ]
    assert_every_row_once(job_world)


class _SecondTrainerRefusedOnce(LocalBackend):
    """The backend refuses the group's second trainer the first time (a pod create the cluster
    refused, a quota), after the first trainer was launched."""

    refused = False

    def launch(self, request: LaunchRequest) -> Handle:
        if request.name == "trainer-1" and not self.refused:
            type(self).refused = True
            raise RuntimeError("refused: exceeded quota")
        return super().launch(request)


def test_a_group_whose_start_failed_part_way_starts_again_whole(job_world: JobWorld) -> None:
    """A group started in part would wait for its missing member at the rendezvous for good: the
    part that was launched is stopped and the next group starts whole."""
    _SecondTrainerRefusedOnce.refused = False
    submit(job_world.job(**group(2)), store=job_world.store)
    factory = lambda m: _SecondTrainerRefusedOnce(m.paths.executors, on_event=m.backend_event)  # noqa: E731
    with running(job_world, backend_factory=factory):
        record = _ended(job_world)
    assert _SecondTrainerRefusedOnce.refused
    assert record.status["phase"] == "Succeeded", record.status["message"]
    regroups = [e for e in job_world.store.events("job") if e.type == "TrainersRegrouped"]
    assert [e.data["generation"] for e in regroups] == [1, 2]
    assert record.status["master"]["trainer_generation"] == 2
    assert_every_row_once(job_world)
