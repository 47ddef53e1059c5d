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
    TrainerMetrics,
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


def _executor(name: str, **telemetry: float) -> dict[str, object]:
    return {
        "handle": {"name": name, "role": "data", "index": 0, "allotment": {"cpu": 1.0, "memory": 2**30}},
        "state": "running",
        "telemetry": {
            "cpu_util": 0.5,
            "rss": 2**28,
            "mem_util": 0.25,
            "rows_per_s": 10.0,
            "read_bytes": 0,
            "write_bytes": 0,
            "wait_s": 0.0,
            "busy_s": 1.0,
            **telemetry,
        },
    }


def test_salvage_drops_only_the_parts_that_do_not_fit() -> None:
    raw = {
        "phase": "Running",
        "executors": {
            "data-0": _executor("data-0", rss="a lot"),  # its telemetry does not fit; the executor does
            "data-1": _executor("data-1"),
            "data-2": {"state": "running"},  # no handle: nothing of it can be read
        },
        "progress": {"acked_rows": 42, "quarantine": [{"task": "t-1", "rows": ["x", 5]}, {"task": "t-2"}]},
        "windows": [
            {"start": "2026-11-01", "end": "2026-11-02", "state": "appended", "rows": "many"},
            # A state this version does not know: the window goes, rather than read as appended.
            {"start": "2026-11-02", "end": "2026-11-03", "state": "postponed"},
        ],
        "savepoints": {"sp-1": {"state": "done", "step": 7}},
    }
    with pytest.raises(ValueError):
        JobStatus.read(raw)
    status, dropped = JobStatus.salvage(raw)
    assert set(dropped) == {
        "executors.data-0.telemetry",
        "executors.data-2",
        "progress.quarantine.0.rows",
        "windows.0.rows",
        "windows.1",
    }
    assert status.phase is Phase.RUNNING and status.progress.acked_rows == 42
    assert status.executors["data-0"].telemetry is None and status.executors["data-0"].handle.role == "data"
    assert (
        status.executors["data-1"].telemetry is not None
        and status.executors["data-1"].telemetry.cpu_util == 0.5
    )
    assert set(status.executors) == {"data-0", "data-1"}
    assert [(q.task, q.rows) for q in status.progress.quarantine] == [
        ("t-1", [None, None]),
        ("t-2", [None, None]),
    ]
    assert [(w.start, w.rows) for w in status.windows] == [("2026-11-01", None)]
    assert status.savepoints["sp-1"].step == 7
    assert raw["windows"][1]["state"] == "postponed"  # the stored document is left as it was


def test_salvage_names_parts_never_their_values() -> None:
    secret = "s3cr3t-token-value"
    status, dropped = JobStatus.salvage({"master": {"pid": secret, "api": secret}, "message": "ok"})
    assert status.master is None and status.message == "ok"
    assert dropped == ("master",) and secret not in repr(dropped)


def test_salvage_of_a_valid_empty_or_unreadable_document() -> None:
    valid = {"phase": "Succeeded", "executors": {"data-0": _executor("data-0")}}
    assert JobStatus.salvage(valid) == (JobStatus.read(valid), ())
    assert JobStatus.salvage(None) == (JobStatus(), ()) and JobStatus.salvage({}) == (JobStatus(), ())
    assert JobStatus.salvage(["not", "a", "status"]) == (JobStatus(), ("(the whole document)",))  # type: ignore[arg-type]


def test_a_field_renamed_in_the_status_is_an_error_not_a_blank() -> None:
    """A master that wrote ``cpu_utilisation`` for ``cpu_util``: reading fails, and a reader that
    salvages says which part it left out; the pages then show no telemetry for that executor and
    the web server's log says why, instead of a blank cell nobody explains."""
    renamed = _executor("data-0")
    telemetry = renamed["telemetry"]
    assert isinstance(telemetry, dict)
    telemetry["cpu_utilisation"] = telemetry.pop("cpu_util")
    with pytest.raises(ValueError, match="cpu_util"):
        JobStatus.read({"executors": {"data-0": renamed}})
    assert JobStatus.salvage({"executors": {"data-0": renamed}})[1] == ("executors.data-0.telemetry",)


def test_a_field_misnamed_by_a_reader_is_an_error_not_a_blank() -> None:
    """Where a dict lookup of a wrong key read None (a blank cell), the model has no such attribute:
    mypy refuses it, and so does the model at run time."""
    status = JobStatus.read({"progress": {"acked_rows": 3}})
    assert status.progress.acked_rows == 3
    with pytest.raises(AttributeError):
        _ = status.progress.acked_row  # type: ignore[attr-defined]


def test_the_trainer_metrics_read_what_fits_and_leave_the_rest() -> None:
    progress = JobStatus.read(
        {
            "progress": {
                "trainer_metrics": {
                    "mode": "mixed",
                    "progressive": {"auc": 0.77, "window_auc": "high"},
                    "freshness_s": {"p50": 1.5},
                    "watermark": 1234,  # not an ISO time: unknown
                    "steps": 10,  # the trainer's own, not shown
                }
            }
        }
    ).progress
    m = progress.metrics()
    assert (m.mode, m.progressive.auc, m.progressive.window_auc, m.freshness_s.p50, m.watermark) == (
        "mixed",
        0.77,
        None,
        1.5,
        None,
    )
    assert JobStatus().progress.metrics() == TrainerMetrics()
