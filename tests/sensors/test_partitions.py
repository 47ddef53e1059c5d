"""DataPartitionSensor on real files: poke, deferral to the trigger, and the outcome of a deferral."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pendulum
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, TaskDeferred

from airflow_provider_primus.sensors.partitions import DataPartitionSensor
from airflow_provider_primus.triggers.partitions import DataPartitionTrigger
from tests.triggers.conftest import Lake


def sensor(lake: Lake, **kw: Any) -> DataPartitionSensor:
    return DataPartitionSensor(
        task_id="wait", spec_path=str(lake.spec_path), source="clicks", start=lake.start, end=lake.end, **kw
    )


def test_poke_is_false_until_every_partition_is_ready(lake: Lake) -> None:
    op = sensor(lake)
    for t in lake.hours[:-1]:
        lake.land(t)
    first = op.poke({})
    assert not first.is_done
    lake.land(lake.hours[-1])
    done = op.poke({})
    assert done.is_done and done.xcom_value == lake.paths()


def test_default_range_is_the_data_interval(lake: Lake) -> None:
    op = DataPartitionSensor(task_id="wait", spec_path=str(lake.spec_path), source="clicks")
    start = pendulum.instance(lake.hours[0])
    op.render_template_fields({"data_interval_start": start, "data_interval_end": start.add(hours=3)})
    assert (op.start, op.end) == (lake.start, lake.end)
    for t in lake.hours:
        lake.land(t)
    assert op.poke({}).xcom_value == lake.paths()


def test_a_run_without_a_data_interval_fails_clearly(lake: Lake) -> None:
    op = DataPartitionSensor(task_id="wait", spec_path=str(lake.spec_path), source="clicks")
    op.render_template_fields({"data_interval_start": None, "data_interval_end": None})
    with pytest.raises(AirflowException, match="no data interval"):
        op.poke({})


def test_an_unknown_source_fails_the_poke(lake: Lake) -> None:
    op = DataPartitionSensor(
        task_id="wait", spec_path=str(lake.spec_path), source="clickz", start=lake.start, end=lake.end
    )
    with pytest.raises(AirflowException, match="unknown source 'clickz'"):
        op.poke({})


def test_execute_defers_to_the_trigger_while_partitions_are_missing(lake: Lake) -> None:
    op = sensor(lake, poke_interval=5, timeout=600)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, DataPartitionTrigger)
    assert trigger.serialize()[1] == {
        "spec_path": str(lake.spec_path),
        "source": "clicks",
        "start": lake.start,
        "end": lake.end,
        "poll_interval": 5.0,
        "timeout_s": 600.0,
    }
    assert deferred.value.timeout is not None and deferred.value.timeout > timedelta(seconds=600)


def test_execute_returns_at_once_when_everything_is_there(lake: Lake) -> None:
    for t in lake.hours:
        lake.land(t)
    assert sensor(lake).execute({}) == lake.paths()


def test_execute_complete_turns_the_triggers_events_into_the_outcome(lake: Lake) -> None:
    op = sensor(lake, poke_interval=0.02, timeout=0.2)
    lake.land(lake.hours[0])
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    timed_out = asyncio.run(anext(deferred.value.trigger.run())).payload
    with pytest.raises(AirflowSensorTimeout, match=r"missing partitions: .*/01, .*/02"):
        op.execute_complete({}, timed_out)
    for t in lake.hours[1:]:
        lake.land(t)
    ready = asyncio.run(anext(deferred.value.trigger.run())).payload
    assert op.execute_complete({}, ready) == lake.paths()
    with pytest.raises(AirflowException, match="unknown source"):
        op.execute_complete({}, {"status": "error", "message": "unknown source 'x'", "missing": []})


def test_soft_fail_skips_on_timeout(lake: Lake) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    op = sensor(lake, soft_fail=True)
    with pytest.raises(AirflowSkipException):
        op.execute_complete({}, {"status": "error", "message": "timed out", "missing": [lake.paths()[0]]})
