"""The dispatcher: pull-based leasing of data tasks with exact, consumer-acknowledged progress.

Model (after a reconcile loop: one owner of the state, every call idempotent):

* A task is cut into **work items**: row ranges [start, end) of it (end None: to the task's end).
  Progress is what the *consumer* acknowledged, per task, as a set of row ranges — never what a
  reader read. A lease hands out an item from its first unacknowledged row.
* An executor heartbeats; when it stops, every item it held (leased, or sent but not yet fully
  acknowledged) goes back to the queue from its acknowledged position.
* A task's failure (corrupt file, schema mismatch) is retried up to ``max_attempts`` leases, then
  quarantined with its errors; the job fails only when quarantined tasks exceed ``max_failed_share``.
  A quarantined task's rows are missing from training, so its source, file(s), the rows not
  delivered and the last error are kept and shown (``status()["quarantine"]``), never only counted.
* Rows an executor leaves out for having no label (``missing_label: drop``) are reported with the
  item's release: they count as accounted for (the task can finish) and per task as
  ``rows_without_label``. Kept as row ranges, so a re-read after a retry or restart counts once.
* An idle executor with nothing to lease splits the largest remaining range of a straggler: the
  straggler learns its shorter end at its next heartbeat.
* With time-ordering barriers, an item is leased only when every group before its group is done.
* Each launch of an executor slot (``data-0``) is a new **incarnation** named ``data-0.<n>``. Once the
  master has replaced an incarnation (it ended, or hung: see ``liveness``) it **fences** the slot
  below the new one: the older incarnation's register, heartbeat, lease, release and failure calls are
  refused, so a hung executor that wakes up can neither take nor hand back work beside its
  replacement (its heartbeat answer says ``fenced`` and it stops).
* With several consumers (data-parallel trainers sharing the data executors), a consumer **claims**
  the rows of each batch it receives before training on them: the first claim of a row wins, so a
  row re-sent after a restart (an executor's stale read-ahead, a re-leased range) reaches one trainer
  only. Claims start from the acknowledged rows and restart from them with every rewind.

Rows of a task are deterministic (same files, same order), so a row re-read by another executor is
the same row: the loader drops ranges it already yielded, which makes delivery exactly once.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.service.intervals import IntervalSet
from airflow_provider_primus.errors import PrimusError

PENDING, LEASED, SENT, DONE, QUARANTINED = "pending", "leased", "sent", "done", "quarantined"


class JobFailed(PrimusError):
    """Too large a share of the graph's tasks is quarantined."""


@dataclass
class WorkItem:
    item_id: str
    task: Task
    start: int
    end: int | None
    state: str = PENDING
    attempts: int = 0
    executor: str | None = None
    epoch: int = 0
    sent_at: float = 0.0


@dataclass(frozen=True)
class Lease:
    item_id: str
    task: Task
    start_row: int
    end_row: int | None
    epoch: int


@dataclass
class ExecutorInfo:
    name: str
    location: str
    last_seen: float
    metrics: dict[str, Any] = field(default_factory=dict)
    asked: float = 0.0  # its last lease call: a live reader with nothing to read asks every 50 ms


def incarnation_of(executor: str) -> tuple[str, int] | None:
    """``data-0.3`` -> (``data-0``, 3): the slot and incarnation a master-launched name carries
    (None for a name without one, e.g. an executor a test or benchmark started by hand)."""
    slot, _, number = executor.rpartition(".")
    return (slot, int(number)) if slot and number.isdigit() else None


class Dispatcher:
    """Thread-safe; every operation costs O(log n) in the number of work items (a heap of pending
    items, indexes by task and by executor), so graphs of 100,000+ tasks lease as fast as small ones."""

    def __init__(
        self,
        tasks: Iterable[Task],
        edges: Iterable[tuple[str, str]] = (),
        *,
        progress: Mapping[str, Iterable[tuple[int, int]]] | None = None,
        executor_timeout_s: float = 10.0,
        ack_timeout_s: float = 60.0,
        max_attempts: int = 3,
        max_failed_share: float = 0.0,
        min_split_rows: int = 50_000,
        sealed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.RLock()
        self.clock = clock
        self.executor_timeout_s = executor_timeout_s
        self.ack_timeout_s = ack_timeout_s
        self.max_attempts = max_attempts
        self.max_failed_share = max_failed_share
        self.min_split_rows = min_split_rows
        # An unsealed graph may still grow (windows appended to a running job): finishing all tasks
        # then means "idle", not "finished", and consumers wait for more instead of ending the pass.
        self.sealed = sealed
        self.tasks: dict[str, Task] = {}
        self.total_rows: dict[str, int] = {}
        self.acked: dict[str, IntervalSet] = {}
        self.items: dict[str, WorkItem] = {}
        self.errors: dict[str, list[str]] = {}
        self.quarantined: set[str] = set()
        self.quarantine_info: dict[str, dict[str, Any]] = {}  # task -> source, file(s), error
        self.unlabelled: dict[str, IntervalSet] = {}  # task -> rows left out for having no label
        self.executors: dict[str, ExecutorInfo] = {}
        self._group_open: dict[str, int] = {}
        self._task_done: set[str] = set()
        self._by_task: dict[str, list[WorkItem]] = {}
        self._by_executor: dict[str, set[str]] = {}
        self._leased: set[str] = set()
        self._sent: set[str] = set()
        self._heap: list[tuple[int, str, str, int, str]] = []
        self._waiting: dict[str, list[str]] = {}  # group -> pending items held back by a barrier
        self._before: dict[str, list[str]] = {}
        self._after: dict[str, list[str]] = {}
        self._progress = {t: list(r) for t, r in (progress or {}).items()}
        self.claimed: dict[str, IntervalSet] = {}  # task -> rows some consumer holds (see claim)
        self.fences: dict[str, int] = {}  # slot -> its oldest incarnation still allowed (see fence)
        self._add(tasks, edges)

    def _add(self, tasks: Iterable[Task], edges: Iterable[tuple[str, str]]) -> int:
        for a, b in edges:
            if a not in self._before.get(b, []):
                self._before.setdefault(b, []).append(a)
                self._after.setdefault(a, []).append(b)
        added = []
        for task in tasks:
            if task.task_id in self.tasks:
                continue  # task IDs are content-derived: the same window appended twice adds nothing
            self.tasks[task.task_id] = task
            self.acked[task.task_id] = IntervalSet(self._progress.get(task.task_id, ()))
            self.claimed[task.task_id] = IntervalSet(self._progress.get(task.task_id, ()))
            if task.rows is not None:
                self.total_rows[task.task_id] = task.rows
            self._group_open[task.group] = self._group_open.get(task.group, 0) + 1
            self._push(self._add_item(task, 0, None))
            added.append(task.task_id)
        for task_id in added:
            self._check_task_done(task_id)
        return len(added)

    def rewound(self, progress: Mapping[str, Iterable[tuple[int, int]]]) -> Dispatcher:
        """The same graph with consumption reset to ``progress`` (a restarted trainer's checkpoint):
        rows acknowledged after that checkpoint were never trained into a saved model, so they must
        be served again. Executors of the old instance re-register and lease afresh."""
        with self._lock:
            edges = [(a, b) for b, befores in self._before.items() for a in befores]
            fresh = Dispatcher(
                list(self.tasks.values()),
                edges,
                progress=progress,
                executor_timeout_s=self.executor_timeout_s,
                ack_timeout_s=self.ack_timeout_s,
                max_attempts=self.max_attempts,
                max_failed_share=self.max_failed_share,
                min_split_rows=self.min_split_rows,
                sealed=self.sealed,
                clock=self.clock,
            )
            fresh.fences = dict(self.fences)  # a rewind must not let a fenced incarnation back in
            # Rows without a label were never served: no checkpoint has them, none needs them again.
            for task_id, rows in self.unlabelled.items():
                fresh.unlabelled[task_id] = IntervalSet(rows.ranges())
                fresh._check_task_done(task_id)
            return fresh

    def add_tasks(self, tasks: Iterable[Task], edges: Iterable[tuple[str, str]] = ()) -> int:
        """Grow the graph while it runs; returns how many tasks were new."""
        with self._lock:
            return self._add(tasks, edges)

    def seal(self) -> None:
        with self._lock:
            self.sealed = True

    def forget(self, executor: str) -> None:
        """The executor is known to be gone (its process ended): re-queue what it held now, from the
        acknowledged rows, instead of waiting for its heartbeat to time out."""
        with self._lock:
            self.executors.pop(executor, None)
            for item_id in list(self._by_executor.pop(executor, set())):
                item = self.items[item_id]
                item.executor = None
                if item.state in (LEASED, SENT):
                    self._set_state(item, PENDING)

    def fence(self, slot: str, incarnation: int) -> None:
        """Refuse every incarnation of ``slot`` older than ``incarnation`` from now on, and re-queue
        what they held: they were replaced, and one that still runs (hung, then woken) must not
        serve beside its replacement."""
        with self._lock:
            if self.fences.get(slot, -1) >= incarnation:
                return
            self.fences[slot] = incarnation
            for name in [n for n in (*self.executors, *self._by_executor) if self._fenced(n)]:
                self.forget(name)

    def is_fenced(self, executor: str) -> bool:
        """``executor`` is an incarnation older than its slot's fence: replaced, refused."""
        with self._lock:
            return self._fenced(executor)

    def _fenced(self, executor: str) -> bool:
        known = incarnation_of(executor)
        return known is not None and known[1] < self.fences.get(known[0], -1)

    # --- state helpers ---------------------------------------------------------------------------

    def _add_item(self, task: Task, start: int, end: int | None) -> WorkItem:
        item = WorkItem(f"{task.task_id}@{start}", task, start, end)
        self.items[item.item_id] = item
        self._by_task.setdefault(task.task_id, []).append(item)
        return item

    def _push(self, item: WorkItem) -> None:
        t = item.task
        heapq.heappush(self._heap, (-t.priority, t.group, t.task_id, item.start, item.item_id))

    def _set_state(self, item: WorkItem, state: str, executor: str | None = None) -> None:
        if item.executor is not None:
            self._by_executor.get(item.executor, set()).discard(item.item_id)
        self._leased.discard(item.item_id)
        self._sent.discard(item.item_id)
        item.state, item.executor = state, executor
        if executor is not None:
            self._by_executor.setdefault(executor, set()).add(item.item_id)
        if state == LEASED:
            self._leased.add(item.item_id)
        elif state == SENT:
            self._sent.add(item.item_id)
        elif state == PENDING:
            self._push(item)

    def _item_end(self, item: WorkItem) -> int | None:
        return item.end if item.end is not None else self.total_rows.get(item.task.task_id)

    def _uncovered(self, task_id: str, a: int, b: int) -> list[tuple[int, int]]:
        """The rows of [a, b) neither acknowledged nor left out for having no label."""
        gaps = self.acked[task_id].missing(a, b)
        skipped = self.unlabelled.get(task_id)
        if skipped is None or not gaps:
            return gaps
        return [g for x, y in gaps for g in skipped.missing(x, y)]

    def _first_open(self, task_id: str, a: int) -> int:
        """The first row >= a neither acknowledged nor left out for having no label."""
        acked, skipped = self.acked[task_id], self.unlabelled.get(task_id)
        while True:
            b = acked.first_gap(a)
            if skipped is not None:
                b = skipped.first_gap(b)
            if b == a:
                return a
            a = b

    def _item_complete(self, item: WorkItem) -> bool:
        end = self._item_end(item)
        return end is not None and not self._uncovered(item.task.task_id, item.start, end)

    def _check_task_done(self, task_id: str) -> None:
        if task_id in self._task_done:
            return
        task_items = self._by_task[task_id]
        for item in task_items:
            if item.state not in (DONE, QUARANTINED) and self._item_complete(item):
                self._set_state(item, DONE)
        if all(i.state == DONE for i in task_items):
            self._close_task(task_id)

    def _close_task(self, task_id: str) -> None:
        self._task_done.add(task_id)
        group = self.tasks[task_id].group
        self._group_open[group] -= 1
        if self._group_open[group] == 0:
            for later in self._after.get(group, ()):
                for item_id in self._waiting.pop(later, []):
                    self._push(self.items[item_id])

    def _barrier_open(self, item: WorkItem) -> bool:
        return all(self._group_open.get(g, 0) == 0 for g in self._before.get(item.task.group, ()))

    def _reap(self) -> None:
        now = self.clock()
        for name, info in list(self.executors.items()):
            if now - info.last_seen > self.executor_timeout_s:
                del self.executors[name]
                for item_id in list(self._by_executor.pop(name, set())):
                    item = self.items[item_id]
                    item.executor = None
                    if item.state in (LEASED, SENT):
                        self._set_state(item, PENDING)
        for item_id in list(self._sent):
            item = self.items[item_id]
            if now - item.sent_at > self.ack_timeout_s:  # sent but never acknowledged: lost in flight
                self._set_state(item, PENDING)

    def _next_pending(self) -> WorkItem | None:
        while self._heap:
            *_, item_id = heapq.heappop(self._heap)
            item = self.items[item_id]
            if item.state != PENDING:
                continue  # a stale heap entry
            if not self._barrier_open(item):
                self._waiting.setdefault(item.task.group, []).append(item_id)
                continue
            return item
        return None

    # --- API (each method is one RPC of the dispatcher service) ---------------------------------

    def register(self, executor: str, location: str) -> bool:
        """False: refused, the executor's incarnation is fenced (a newer one replaced it)."""
        with self._lock:
            if self._fenced(executor):
                return False
            now = self.clock()
            self.executors[executor] = ExecutorInfo(executor, location, now, asked=now)
            return True

    def heartbeat(self, executor: str, metrics: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Keeps the executor's items; tells it the current end of each item it holds (splits) and,
        by omission, which items it no longer holds (reaped while it was unreachable)."""
        with self._lock:
            if self._fenced(executor):
                return {"known": False, "fenced": True}
            info = self.executors.get(executor)
            if info is None:
                return {"known": False}
            info.last_seen = self.clock()
            info.metrics = dict(metrics or {})
            held = {i: self._item_end(self.items[i]) for i in self._by_executor.get(executor, ())}
            return {"known": True, "items": held}

    def lease(self, executor: str) -> Lease | None:
        with self._lock:
            self._reap()
            self._raise_if_failed()
            info = self.executors.get(executor)
            if info is None or self._fenced(executor):
                return None
            info.last_seen = info.asked = self.clock()
            item = self._next_pending() or self._split_for(executor)
            if item is None:
                return None
            self._set_state(item, LEASED, executor)
            item.attempts += 1
            item.epoch += 1
            start = self._first_open(item.task.task_id, item.start)
            return Lease(item.item_id, item.task, start, item.end, item.epoch)

    def _split_for(self, executor: str) -> WorkItem | None:
        """Give an idle executor the second half of the largest unacknowledged leased range."""
        best: tuple[int, WorkItem, int] | None = None
        for item_id in self._leased:
            item = self.items[item_id]
            end = self._item_end(item)
            if end is None or item.executor == executor:
                continue
            pos = self._first_open(item.task.task_id, item.start)
            remaining = end - pos
            if remaining >= 2 * self.min_split_rows and (best is None or remaining > best[0]):
                best = (remaining, item, pos)
        if best is None:
            return None
        remaining, item, pos = best
        mid = pos + remaining // 2
        tail = self._add_item(item.task, mid, item.end)
        item.end = mid
        return tail

    def release(
        self,
        executor: str,
        item_id: str,
        total_rows: int | None = None,
        unlabelled: Iterable[tuple[int, int]] = (),
    ) -> None:
        """The executor has sent every row of the item; it now waits for acknowledgements.
        ``unlabelled``: the item's rows it left out for having no label (task row ranges)."""
        with self._lock:
            item = self.items.get(item_id)
            if item is None or item.executor != executor or item.state != LEASED or self._fenced(executor):
                return
            if total_rows is not None and item.task.task_id not in self.total_rows:
                self.total_rows[item.task.task_id] = total_rows
            for a, b in unlabelled:
                self.unlabelled.setdefault(item.task.task_id, IntervalSet()).add(a, b)
            self._set_state(item, SENT, executor)
            item.sent_at = self.clock()
            self._check_task_done(item.task.task_id)

    def fail(self, executor: str, item_id: str, error: str, file: str | None = None) -> None:
        """``file``: the file the error names, when the executor knows it (else the task's files
        stand for it)."""
        with self._lock:
            item = self.items.get(item_id)
            if item is None or item.executor != executor or self._fenced(executor):
                return
            task_id = item.task.task_id
            self.errors.setdefault(task_id, []).append(error)
            if item.attempts >= self.max_attempts:
                for other in self._by_task[task_id]:
                    self._set_state(other, QUARANTINED)
                self.quarantined.add(task_id)
                files = [s.path for s in item.task.slices]
                self.quarantine_info[task_id] = {
                    "source": item.task.source,
                    "file": file or (files[0] if len(files) == 1 else None),
                    "files": files,
                    "error": error,
                    "attempts": item.attempts,
                }
                self._close_task(task_id)
            else:
                self._set_state(item, PENDING)

    def ack(self, task_id: str, ranges: Iterable[tuple[int, int]]) -> None:
        with self._lock:
            acked = self.acked.get(task_id)
            if acked is None:
                return
            claimed = self.claimed[task_id]
            for a, b in ranges:
                acked.add(a, b)
                claimed.add(a, b)
            self._check_task_done(task_id)

    def claim(self, task_id: str, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """The parts of ``ranges`` no consumer claimed before, now this caller's: the rows it may
        train. A row is claimed once, whichever executor sent it and however often."""
        with self._lock:
            claimed = self.claimed.get(task_id)
            if claimed is None:
                return []
            granted = [g for a, b in ranges for g in claimed.missing(a, b)]
            for a, b in granted:
                claimed.add(a, b)
            return granted

    # --- views -----------------------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self.tasks and len(self.quarantined) / len(self.tasks) > self.max_failed_share:
            raise JobFailed(self.failure_message())

    def quarantine(self) -> dict[str, dict[str, Any]]:
        """Each quarantined task: its source, the file the error names (else its only file), all its
        files, ``rows`` [first, end) spanning the rows never delivered (end None when the task's
        length is unknown), ``rows_missing`` (None likewise) and the last error."""
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for task_id in sorted(self.quarantined):
                info = dict(
                    self.quarantine_info.get(task_id) or {"error": self.errors.get(task_id, ["?"])[-1]}
                )
                total = self.total_rows.get(task_id)
                if total is not None:
                    gaps = self._uncovered(task_id, 0, total)
                    info["rows"] = [gaps[0][0], gaps[-1][1]] if gaps else [total, total]
                    info["rows_missing"] = sum(b - a for a, b in gaps)
                else:
                    info["rows"] = [self._first_open(task_id, 0), None]
                    info["rows_missing"] = None
                out[task_id] = {"task": task_id, **info}
            return out

    def rows_without_label(self) -> dict[str, int]:
        """Per task, the rows left out for having no label (only tasks that had some)."""
        with self._lock:
            return {t: s.total() for t, s in sorted(self.unlabelled.items()) if s.total()}

    def failure_message(self) -> str:
        lines = [
            f"{len(self.quarantined)} of {len(self.tasks)} tasks quarantined "
            f"(allowed share {self.max_failed_share:.0%}):"
        ]
        lines += [f"  {t}: {self.errors.get(t, ['?'])[-1]}" for t in sorted(self.quarantined)]
        return "\n".join(lines)

    def failed(self) -> bool:
        with self._lock:
            return bool(self.tasks) and len(self.quarantined) / len(self.tasks) > self.max_failed_share

    def finished(self) -> bool:
        with self._lock:
            return self.sealed and len(self._task_done) == len(self.tasks)

    def tasks_done(self, task_ids: Iterable[str]) -> int:
        """How many of these tasks are fully consumed (a window's progress)."""
        with self._lock:
            return sum(1 for t in task_ids if t in self._task_done and t not in self.quarantined)

    def idle(self) -> bool:
        """Every task known so far is done (more may still be appended when unsealed)."""
        with self._lock:
            return len(self._task_done) == len(self.tasks)

    def progress(self) -> dict[str, list[tuple[int, int]]]:
        """Acknowledged rows per task: what a checkpoint stores and a restart restores."""
        with self._lock:
            return {t: s.ranges() for t, s in self.acked.items() if s.ranges()}

    def by_source(self) -> dict[str, dict[str, int]]:
        """Per source (a job's data service serves several): its tasks, those done and quarantined,
        its rows (as far as known) and the rows acknowledged. O(tasks): a status view."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for task_id, task in self.tasks.items():
                tally = out.setdefault(
                    task.source,
                    {"tasks": 0, "tasks_done": 0, "tasks_quarantined": 0, "rows": 0, "acked_rows": 0},
                )
                tally["tasks"] += 1
                if task_id in self.quarantined:
                    tally["tasks_quarantined"] += 1
                elif task_id in self._task_done:
                    tally["tasks_done"] += 1
                tally["rows"] += self.total_rows.get(task_id, 0)
                tally["acked_rows"] += self.acked[task_id].total()
            return out

    def liveness(self) -> dict[str, dict[str, float | int]]:
        """Each registered executor's signs of life, for the master's hang check: ``seen`` (its last
        call of any kind: heartbeats come every second), ``asked`` (its last lease call) and
        ``holds`` (the items it holds). O(executors)."""
        with self._lock:
            return {
                name: {
                    "seen": info.last_seen,
                    "asked": info.asked,
                    "holds": len(self._by_executor.get(name, ())),
                }
                for name, info in self.executors.items()
            }

    def work_waiting(self) -> bool:
        """Some item could be leased right now (pending, its barrier open): an executor holding
        nothing that does not ask for it is not serving. O(log n)."""
        with self._lock:
            item = self._next_pending()
            if item is None:
                return False
            self._push(item)
            return True

    def executor_metrics(self) -> dict[str, dict[str, Any]]:
        """Each registered executor's last heartbeat metrics: O(executors), for a master's every pass."""
        with self._lock:
            return {name: dict(info.metrics) for name, info in self.executors.items()}

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._reap()
            states: dict[str, int] = {}
            for item in self.items.values():  # O(items): a status view, not on the lease path
                states[item.state] = states.get(item.state, 0) + 1
            return {
                "tasks": len(self.tasks),
                "done": len(self._task_done) - len(self.quarantined),
                "quarantined": {t: self.errors.get(t, []) for t in sorted(self.quarantined)},
                "quarantine": self.quarantine(),
                "rows_without_label": self.rows_without_label(),
                "items": states,
                "acked_rows": sum(s.total() for s in self.acked.values()),
                "executors": {
                    n: {"location": e.location, "metrics": e.metrics}
                    for n, e in sorted(self.executors.items())
                },
                "finished": self.sealed and len(self._task_done) == len(self.tasks),
                "idle": len(self._task_done) == len(self.tasks),
                "failed": self.failed(),
            }
