"""The charts' durable history a master keeps in the job status: bounded, downsampled when old,
resumed after a restart."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_primus.contracts.status import JobStatus
from airflow_provider_primus.master.history import EVERY_S_ENV, StatusHistory, point_from_dict


def executor(name: str, state: str, cpu_util: float) -> dict[str, Any]:
    handle = {
        "name": name,
        "role": "data",
        "index": int(name[-1]),
        "allotment": {"cpu": 1.0, "memory": 2**30},
    }
    usage = {"cpu_util": cpu_util, "rss": 2**28, "mem_util": 0.25, "rows_per_s": 10.0}
    return {
        "handle": handle,
        "state": state,
        "telemetry": {**usage, "read_bytes": 0, "write_bytes": 0, "wait_s": 0.0, "busy_s": 1.0},
    }


def status(rows: int, auc: float | None = 0.7) -> JobStatus:
    return JobStatus.read(
        {
            "progress": {"acked_rows": rows, "trainer_metrics": {"progressive": {"auc": auc}}},
            "executors": {
                "data-0": executor("data-0", "running", 0.5),
                "data-1": executor("data-1", "removed", 0.1),
            },
        }
    )


def test_a_point_every_so_often_with_the_running_executors() -> None:
    history = StatusHistory(every_s=20.0)
    assert history.add(status(1), now=100.0)
    assert not history.add(status(2), now=110.0)  # too soon
    assert history.add(status(3), now=120.0)
    points = history.points()
    assert [(p.t, p.acked_rows) for p in points] == [(100.0, 1.0), (120.0, 3.0)]
    assert points[0].executors == {"data-0": {"cpu_util": 0.5, "mem_util": 0.25, "rows_per_s": 10.0}}
    assert point_from_dict(history.to_list()[1]) == points[1]  # what the status stores reads back


def test_bounded_and_old_points_thinned_not_dropped() -> None:
    history = StatusHistory(every_s=1.0, recent=10, archive=10)
    for i in range(500):
        history.add(status(i), now=float(i))
    points = history.points()
    assert len(points) <= 20
    assert [p.t for p in points[-10:]] == [float(i) for i in range(490, 500)]  # recent: full grain
    assert points[0].t < 100  # the start of the job is still there, at a coarser grain
    assert [p.t for p in points] == sorted(p.t for p in points)


def test_a_restarted_master_resumes_the_series_it_finds() -> None:
    first = StatusHistory(every_s=1.0, recent=5, archive=5)
    for i in range(8):
        first.add(status(i), now=float(i))
    resumed = StatusHistory(first.to_list(), every_s=1.0, recent=5, archive=5)
    assert resumed.points() == first.points()
    resumed.add(status(9), now=9.0)
    assert [p.t for p in resumed.points()][-2:] == [7.0, 9.0]
    garbled = StatusHistory([{"t": "yesterday"}, {"t": 3.0, "auc": "high"}, *first.to_list()[:1]])
    assert [(p.t, p.auc) for p in garbled.points()] == [(0.0, 0.7), (3.0, None)]


def test_the_final_status_is_always_a_point() -> None:
    history = StatusHistory(every_s=20.0)
    assert history.add(status(1), now=100.0)
    assert not history.add(status(2), now=105.0)
    assert history.add(status(3), now=106.0, force=True)  # the job ended: its last figures stay
    assert not history.add(status(3), now=106.0, force=True)  # once
    assert [p.acked_rows for p in history.points()] == [1.0, 3.0]


def test_the_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert StatusHistory().every_s == 20.0
    monkeypatch.setenv(EVERY_S_ENV, "0.5")
    assert StatusHistory().every_s == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv(EVERY_S_ENV, bad)
        with pytest.raises(ValueError, match=f"{EVERY_S_ENV}='{bad}'"):
            StatusHistory()
