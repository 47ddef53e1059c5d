"""The status contract: one definition of phases, status shapes and event payloads, from which the
CRD's status schema is generated."""

from __future__ import annotations

import pytest

from airflow_provider_primus.contracts.crd import STATUS_SCHEMA, openapi_schema
from airflow_provider_primus.contracts.status import (
    TERMINAL,
    Desired,
    Event,
    EventType,
    JobStatus,
    Phase,
    ScalePayload,
    StreamPayload,
    is_terminal,
    payload_model,
)


def test_terminal_is_a_property_of_the_phase() -> None:
    assert {p for p in Phase if p.terminal} == set(TERMINAL) == {Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED}
    assert is_terminal("Failed") and not is_terminal("Running") and not is_terminal(None)
    assert not is_terminal("Exploded")  # a phase this version does not know is not an end


def test_a_missing_or_partial_status_reads_as_a_pending_job() -> None:
    assert JobStatus.read(None).phase is Phase.PENDING
    status = JobStatus.read({"phase": "Running", "from_a_newer_master": {"x": 1}, "progress": {"tasks": 3}})
    assert status.phase is Phase.RUNNING and status.progress.tasks == 3


def test_the_stored_form_reads_back_to_the_same_status() -> None:
    raw = {
        "phase": "Succeeded",
        "message": "Succeeded with 1 task quarantined",
        "executors": {
            "data-0": {
                "handle": {
                    "name": "data-0",
                    "role": "data",
                    "index": 0,
                    "allotment": {"cpu": 0.5, "memory": 2**30},
                },
                "state": "completed",
                "telemetry": None,
            }
        },
        "progress": {"tasks_quarantined": 1, "quarantine": [{"task": "history-0123", "rows": [10, None]}]},
        "savepoints": {"sp-1": {"state": "done", "step": 50, "checkpoint": "ckpt-000000000050.pt"}},
        "data_progress": {"history-0123": [[0, 10]]},
    }
    status = JobStatus.read(raw)
    assert JobStatus.read(status.to_json()) == status
    assert status.to_json()["executors"]["data-0"]["state"] == "completed"


def test_event_payloads_are_typed_per_event_type() -> None:
    decision = Event(
        seq=1,
        time=0.0,
        type="ScaleDecision",
        message="data: 2 -> 3",
        data={
            "action": "scale_out",
            "role": "data",
            "before": 2,
            "after": 3,
            "reason": "trainer waits",
            "t": 1.0,
        },
    ).payload()
    assert isinstance(decision, ScalePayload) and (decision.before, decision.after) == (2, 3)
    assert payload_model("StreamOffsetReset") is StreamPayload
    unknown = Event(seq=2, time=0.0, type="FromTheFuture", message="?", data={"k": 1}).payload()
    assert unknown.model_dump() == {"k": 1}  # kept, without a schema


@pytest.mark.parametrize("event_type", list(EventType))
def test_every_event_type_has_a_payload_model(event_type: EventType) -> None:
    assert payload_model(event_type.value) is not None


def test_the_crd_status_schema_is_generated_from_the_model() -> None:
    assert set(STATUS_SCHEMA["properties"]) == set(JobStatus.model_fields)
    assert STATUS_SCHEMA["properties"]["phase"]["enum"] == [p.value for p in Phase]
    executor = STATUS_SCHEMA["properties"]["executors"]["additionalProperties"]["properties"]
    assert executor["state"]["enum"] == ["running", "removing", "completed", "failed", "removed"]
    assert executor["exit_code"] == {"type": "integer", "nullable": True}
    assert openapi_schema()["properties"]["status"] == STATUS_SCHEMA


def test_desired_reads_empty_partial_and_hand_written_documents() -> None:
    assert Desired.read(None) == Desired.read({}) == Desired()
    assert not Desired().stop and Desired().scale_gen == 0 and Desired().windows == []
    desired = Desired.read(
        {
            "scale": {"data": 3},  # the scale subresource writes only this
            "resize": {"data-0": {"cpu": "500m", "memory": "512Mi"}, "data-1": {"cpu": 2}},
            "resize_gen": 1,
            "windows": [{"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z"}],
            "savepoints": ["sp1"],
            "from_a_newer_client": True,
        }
    )
    assert desired.scale == {"data": 3} and desired.scale_gen == 0 and desired.resize_gen == 1
    assert desired.resize["data-0"].memory == "512Mi" and desired.resize["data-1"].cpu == 2
    assert desired.resize["data-1"].memory is None
    assert desired.windows[0].source is None and desired.savepoints == ["sp1"]
