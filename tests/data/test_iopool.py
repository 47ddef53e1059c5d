"""The planner's shared round-trip threads: per-lane limits, ordering, reuse, errors, fork."""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

import pytest

from airflow_provider_primus.data import iopool
from airflow_provider_primus.data.iopool import Lane


def collect(lane: Lane) -> dict[Any, tuple[Any, BaseException | None]]:
    results = {}
    while lane.pending:
        tag, result, error = lane.get(timeout=10)
        results[tag] = (result, error)
    return results


class Gate:
    """Jobs that block until opened, counting how many are running at once."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.cond = threading.Condition()
        self.running = 0
        self.most = 0

    def job(self, value: Any) -> Any:
        with self.cond:
            self.running += 1
            self.most = max(self.most, self.running)
            self.cond.notify_all()
        self.open.wait(10)
        with self.cond:
            self.running -= 1
        return value

    def wait_running(self, n: int, timeout: float = 10) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.running >= n, timeout)

    def submit(self, lane: Lane, n: int) -> None:
        for i in range(n):
            lane.submit(i, self.job, i)


def all_in_flight_at_once(limit: int) -> None:
    """A fresh lane runs ``limit`` blocking jobs at the same time, then finishes them."""
    gate = Gate()
    with Lane(limit) as lane:
        gate.submit(lane, limit)
        assert gate.wait_running(limit)
        gate.open.set()
        collect(lane)


def test_a_lane_keeps_its_own_limit_on_jobs_in_flight() -> None:
    gate = Gate()
    with Lane(3) as lane:
        gate.submit(lane, 10)
        assert gate.wait_running(3)
        # Nothing else starts while three are in flight (waiting for what must not happen).
        assert not gate.wait_running(4, timeout=0.2)
        assert lane.pending == 10
        gate.open.set()
        results = collect(lane)
    assert gate.most == 3
    assert results == {i: (i, None) for i in range(10)}


def test_errors_come_back_with_their_tag_and_do_not_stop_the_lane() -> None:
    def fail(tag: str) -> None:
        raise ValueError(f"bad {tag}")

    with Lane(2) as lane:
        lane.submit("a", fail, "a")
        lane.submit("b", str.upper, "b")
        results = collect(lane)
    error = results["a"][1]
    assert isinstance(error, ValueError) and str(error) == "bad a"
    assert results["b"] == ("B", None)


def test_jobs_start_in_submission_order_and_only_the_owner_submits() -> None:
    order: list[int] = []
    with Lane(1) as lane:
        for i in range(5):
            lane.submit(i, order.append, i)
        collect(lane)
        assert order == [0, 1, 2, 3, 4]
        # A job (on a pool thread) may not submit: results and follow-ups go through the owner.
        lane.submit("nested", lane.submit, "inner", order.append, 99)
        error = collect(lane)["nested"][1]
    assert isinstance(error, RuntimeError) and "only the thread" in str(error)
    assert 99 not in order


def test_runners_start_only_as_jobs_outstrip_them() -> None:
    with Lane(64) as lane:
        for i in range(3):
            lane.submit(i, str, i)
            collect(lane)  # one job at a time: one runner serves them all
        assert lane.starting == 0
        assert lane._runners == 1


def test_threads_are_started_once_and_shared_by_later_lanes() -> None:
    all_in_flight_at_once(4)
    threads = iopool._POOL.threads
    assert threads >= 4
    all_in_flight_at_once(4)  # all four in flight on the threads the first lane started
    assert iopool._POOL.threads == threads


def test_lanes_open_at_once_each_get_their_full_limit() -> None:
    gate = Gate()
    with Lane(3) as one, Lane(3) as two:
        gate.submit(one, 3)
        gate.submit(two, 3)
        assert gate.wait_running(6)
        gate.open.set()
        assert len(collect(one)) == len(collect(two)) == 3


def test_closing_a_lane_drops_the_jobs_not_started() -> None:
    gate = Gate()
    ran: list[int] = []
    lane = Lane(1)
    lane.submit(0, gate.job, 0)
    lane.submit(1, ran.append, 1)
    assert gate.wait_running(1)
    lane.close()
    gate.open.set()
    assert lane.get(timeout=10) == (0, 0, None)
    with pytest.raises(queue.Empty):
        lane.get(timeout=0.2)  # the queued job never runs
    assert ran == []
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit(2, ran.append, 2)


def test_a_forked_child_runs_jobs_on_threads_of_its_own() -> None:
    with Lane(2) as lane:  # the parent's pool has threads now
        lane.submit("warm", str.upper, "x")
        collect(lane)
    pid = os.fork()
    if pid == 0:  # the child: without the reset its jobs would queue for the parent's threads
        code = 1
        try:
            with Lane(2) as lane:
                lane.submit("child", str.upper, "ok")
                code = 0 if lane.get(timeout=10) == ("child", "OK", None) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
