"""The dispatcher's rules, driven by a deterministic clock (no sleeps)."""

import itertools
from datetime import UTC, datetime

import pytest

from airflow_provider_primus.data.model import FileSlice, Task
from airflow_provider_primus.data.service.dispatcher import Dispatcher, JobFailed

T = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def task(name: str, rows: int | None = 100, group: str = "s@0", priority: int = 0) -> Task:
    return Task(
        name, "s", "files", group, priority, rows, 1, (FileSlice(f"/{name}", 1, rows=rows),), partition_time=T
    )


def make(*tasks: Task, **kw) -> tuple[Dispatcher, Clock]:
    clock = Clock()
    d = Dispatcher(tasks, clock=clock, executor_timeout_s=10, **kw)
    d.register("e1", "grpc://127.0.0.1:1")
    return d, clock


def test_lease_ack_done() -> None:
    d, _ = make(task("a"))
    lease = d.lease("e1")
    assert lease is not None and (lease.start_row, lease.end_row) == (0, None)
    assert d.lease("e1") is None  # nothing else to lease
    d.ack("a", [(0, 60)])
    assert not d.finished()
    d.release("e1", lease.item_id)
    d.ack("a", [(60, 100)])
    assert d.finished() and d.progress() == {"a": [(0, 100)]}


def test_priority_then_group_order() -> None:
    d, _ = make(task("low", group="s@1"), task("high", group="s@2", priority=5), task("early", group="s@0"))
    assert [d.lease("e1").task.task_id for _ in range(3)] == ["high", "early", "low"]  # type: ignore[union-attr]


def test_barrier_waits_for_previous_group() -> None:
    d, _ = make(task("h0", group="s@0"), task("h1", group="s@1"), edges=[("s@0", "s@1")])
    first = d.lease("e1")
    assert first is not None and first.task.task_id == "h0"
    assert d.lease("e1") is None  # h1 waits for every task of s@0
    d.ack("h0", [(0, 100)])
    second = d.lease("e1")
    assert second is not None and second.task.task_id == "h1"


def test_dead_executor_returns_items_from_acked_position() -> None:
    d, clock = make(task("a"))
    lease = d.lease("e1")
    d.ack("a", [(0, 40)])
    clock.now = 11  # e1 missed its heartbeats
    d.register("e2", "grpc://127.0.0.1:2")
    again = d.lease("e2")
    assert again is not None and again.item_id == lease.item_id and again.start_row == 40  # type: ignore[union-attr]
    assert d.heartbeat("e1") == {"known": False}


def test_heartbeat_keeps_leases() -> None:
    d, clock = make(task("a"))
    d.lease("e1")
    for t in range(1, 30):
        clock.now = t
        assert d.heartbeat("e1")["known"]
    d.register("e2", "x")
    assert d.lease("e2") is None


def test_retries_then_quarantine_under_threshold() -> None:
    d, _ = make(task("bad"), task("good"), max_attempts=2, max_failed_share=0.5)
    for _ in range(2):
        lease = d.lease("e1")
        assert lease is not None and lease.task.task_id == "bad"
        d.fail("e1", lease.item_id, "CorruptFileError: /bad")
    good = d.lease("e1")
    assert good is not None and good.task.task_id == "good"
    d.ack("good", [(0, 100)])
    assert d.finished() and not d.failed()
    assert d.status()["quarantined"] == {"bad": ["CorruptFileError: /bad", "CorruptFileError: /bad"]}


def test_a_quarantined_task_keeps_its_source_file_rows_and_error() -> None:
    d, _ = make(task("bad", rows=100), task("good"), max_attempts=2, max_failed_share=0.5)
    lease = d.lease("e1")
    assert lease is not None and lease.task.task_id == "bad"
    d.ack("bad", [(0, 40)])  # rows before the broken page were delivered
    d.fail("e1", lease.item_id, "CorruptFileError: cannot read /bad: checksum", file="/bad")
    assert d.quarantine() == {}  # one more try
    lease = d.lease("e1")
    assert lease is not None and lease.start_row == 40
    d.fail("e1", lease.item_id, "CorruptFileError: cannot read /bad: checksum again")  # file unknown
    [(task_id, info)] = d.status()["quarantine"].items()
    assert task_id == "bad"
    assert info == {
        "task": "bad",
        "source": "s",
        "file": "/bad",  # the task's only file stands for an error that names none
        "files": ["/bad"],
        "rows": [40, 100],
        "rows_missing": 60,
        "error": "CorruptFileError: cannot read /bad: checksum again",
        "attempts": 2,
    }


def test_rows_without_a_label_count_as_accounted_for_once() -> None:
    d, _ = make(task("a", rows=100))
    lease = d.lease("e1")
    assert lease is not None
    d.ack("a", [(0, 10), (12, 50), (51, 100)])
    assert not d.finished()
    d.release("e1", lease.item_id, unlabelled=[(10, 12), (50, 51)])
    assert d.finished()
    assert d.status()["rows_without_label"] == {"a": 3}
    assert d.progress() == {"a": [(0, 10), (12, 50), (51, 100)]}  # never acknowledged by a consumer
    # A trainer restarted from a checkpoint: the rows without a label are not served again.
    rewound = d.rewound({"a": [(0, 10)]})
    rewound.register("e1", "x")
    again = rewound.lease("e1")
    assert again is not None and again.start_row == 12
    rewound.ack("a", [(12, 50), (51, 100)])
    assert rewound.finished() and rewound.rows_without_label() == {"a": 3}


def test_job_fails_over_the_threshold() -> None:
    d, _ = make(task("bad"), task("good"), max_attempts=1, max_failed_share=0.0)
    lease = d.lease("e1")
    d.fail("e1", lease.item_id, "CorruptFileError: /bad")  # type: ignore[union-attr]
    with pytest.raises(JobFailed, match="1 of 2 tasks quarantined"):
        d.lease("e1")


def test_idle_executor_splits_a_straggler() -> None:
    d, _ = make(task("big", rows=1000), min_split_rows=100)
    straggler = d.lease("e1")
    d.ack("big", [(0, 200)])
    d.register("e2", "y")
    tail = d.lease("e2")
    assert tail is not None and (tail.start_row, tail.end_row) == (600, None)
    assert d.heartbeat("e1")["items"] == {straggler.item_id: 600}  # type: ignore[union-attr]
    d.ack("big", [(200, 1000)])
    assert d.finished()


def test_restore_from_progress() -> None:
    d, _ = make(task("a"), task("b"), progress={"a": [(0, 100)], "b": [(0, 30)]})
    lease = d.lease("e1")
    assert lease is not None and lease.task.task_id == "b" and lease.start_row == 30
    assert d.lease("e1") is None


def test_unknown_total_completes_on_release() -> None:
    d, _ = make(task("csv", rows=None))
    lease = d.lease("e1")
    d.ack("csv", [(0, 70)])
    d.release("e1", lease.item_id, total_rows=70)  # type: ignore[union-attr]
    assert d.finished()


def test_many_tasks_with_barriers_all_complete_in_order() -> None:
    """20,000 tasks in 200 ordered groups: every task leased once, groups never overlap."""
    groups = [f"s@{g:03d}" for g in range(200)]
    tasks = [task(f"t{g:03d}-{i:03d}", rows=10, group=groups[g]) for g in range(200) for i in range(100)]
    d, _ = make(*tasks, edges=list(itertools.pairwise(groups)))
    seen: list[str] = []
    while not d.finished():
        lease = d.lease("e1")
        assert lease is not None
        seen.append(lease.task.group)
        d.release("e1", lease.item_id)
        d.ack(lease.task.task_id, [(0, 10)])
    assert len(seen) == 20_000 and seen == sorted(seen)


def test_a_row_is_claimed_once_whoever_received_it_and_claims_restart_from_a_rewind() -> None:
    d, _ = make(task("a"))
    d.ack("a", [(0, 10)])
    assert d.claim("a", [(0, 40)]) == [(10, 40)]  # acknowledged rows are no one's to train again
    assert d.claim("a", [(20, 60)]) == [(40, 60)]  # a re-sent range: only its unclaimed part
    assert d.claim("a", [(60, 100)]) == [(60, 100)]
    assert d.claim("a", [(0, 100)]) == []
    assert d.claim("unknown", [(0, 5)]) == []
    fresh = d.rewound({"a": [(0, 30)]})  # a checkpoint's cut: the rest is to be trained again
    assert fresh.claim("a", [(0, 100)]) == [(30, 100)]


def test_a_fenced_incarnation_is_refused_and_its_items_re_queued() -> None:
    # data-0.0 hung holding a lease; the master fences it as it launches data-0.1.
    d, _ = make(task("a"), task("b"))
    assert d.register("data-0.0", "grpc://127.0.0.1:2")
    old = d.lease("data-0.0")
    assert old is not None
    d.fence("data-0", 1)
    assert d.register("data-0.1", "grpc://127.0.0.1:3")
    assert d.liveness()["data-0.1"]["holds"] == 0 and "data-0.0" not in d.liveness()
    # Woken up, the old incarnation can neither hand back, fail, heartbeat, register nor lease.
    d.release("data-0.0", old.item_id, 100)
    d.fail("data-0.0", old.item_id, "late")
    assert d.heartbeat("data-0.0") == {"known": False, "fenced": True}
    assert not d.register("data-0.0", "grpc://127.0.0.1:2")
    assert d.lease("data-0.0") is None
    # Its item went back to the queue from the acknowledged rows and the replacement takes it.
    leased = {d.lease("data-0.1").task.task_id, d.lease("data-0.1").task.task_id}  # type: ignore[union-attr]
    assert leased == {"a", "b"}
    # A rewind (a trainer restarted) keeps the fence; names without an incarnation are never fenced.
    fresh = d.rewound({})
    assert not fresh.register("data-0.0", "x") and fresh.register("e1", "x")


def test_liveness_shows_an_executor_that_holds_nothing_and_asks_for_nothing() -> None:
    d, clock = make(task("a"))
    assert d.work_waiting()
    clock.now = 5.0
    d.heartbeat("e1")
    signs = d.liveness()["e1"]
    assert (signs["seen"], signs["asked"], signs["holds"]) == (5.0, 0.0, 0)
    lease = d.lease("e1")
    assert lease is not None and not d.work_waiting()  # leased: nothing else waits
    assert d.liveness()["e1"]["holds"] == 1 and d.liveness()["e1"]["asked"] == 5.0
