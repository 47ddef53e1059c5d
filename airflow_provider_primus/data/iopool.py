"""Process-wide threads for the planner's round trips, shared by every plan in the process.

A long-running process plans again and again (the training master joins the next window, a
planning service extends yesterday's range): a thread pool per plan starts and joins its threads
every time, and on a small machine starting 64 threads costs as much GIL-bound CPU as a day's round
trips themselves. Here threads are started once, grow to the largest concurrent demand and never
shrink (an idle one blocks on a queue and costs nothing).

Each plan talks to the pool through its own :class:`Lane`, which keeps the plan's own limit on jobs
in flight (``workers=1`` stays serial even when the process holds 64 threads) and its own result
queue. Results come back as plain tuples rather than ``Future`` objects: a future costs a condition
variable, a re-entrant lock and a callback list per job, which under GIL contention is most of the
Python work of a 20 ms round trip.
"""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

# A lane's job: (tag, function, args, kwargs); None hands a runner's thread back to the pool.
_Job = tuple[Any, Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Pool:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every thread: for a forked child, which has none of its parent's threads."""
        self._runs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._reserved = 0  # sum of the open lanes' high-water marks of jobs in flight
        self._names = itertools.count(1)

    @property
    def threads(self) -> int:
        return self._threads

    def reserve(self, n: int) -> None:
        """Room for ``n`` more jobs in flight: start threads until every reservation has one."""
        with self._lock:
            self._reserved += n
            start = max(0, self._reserved - self._threads)
            self._threads += start
        for _ in range(start):
            threading.Thread(target=self._work, name=f"primus-io-{next(self._names)}", daemon=True).start()

    def release(self, n: int) -> None:
        with self._lock:
            self._reserved -= n

    def put(self, run: Callable[[], None]) -> None:
        self._runs.put(run)

    def stop(self) -> None:
        for _ in range(self._threads):
            self._runs.put(None)

    def _work(self) -> None:
        runs = self._runs
        while (run := runs.get()) is not None:
            run()
            del run  # no reference to a finished lane while idle


_POOL = _Pool()
# A forked child (Airflow's LocalExecutor forks its task processes) starts from an empty pool
# instead of queueing jobs for threads that only exist in the parent.
os.register_at_fork(after_in_child=_POOL.reset)
atexit.register(_POOL.stop)


class Lane:
    """One plan's jobs on the shared pool: at most ``limit`` in flight, the rest queued in order.

    The lane borrows up to ``limit`` pool threads as runners, started as jobs outstrip them and
    given back at :meth:`close`; each takes the next job the moment it finishes one, so a round trip
    never waits for the coordinating thread to start the next. The coordinating thread (the one
    that created the lane) is the only one that submits and collects: the hot path then needs no
    Python lock, only the interpreter's atomic queue and list operations.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._pool = _POOL
        self._owner = threading.get_ident()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._out: queue.SimpleQueue[tuple[Any, Any, BaseException | None]] = queue.SimpleQueue()
        self._runners = 0
        self._started: list[None] = []  # one entry per runner that took a thread (list.append is atomic)
        self._submitted = 0
        self._collected = 0
        self._closed = False

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        """Jobs submitted whose results have not been collected yet."""
        return self._submitted - self._collected

    @property
    def starting(self) -> int:
        """Runners still waiting for a thread (or for the GIL) to take their first job: while there
        are any, the coordinating thread should block rather than compute, or it delays them."""
        return self._runners - len(self._started)

    def submit(self, tag: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        if threading.get_ident() != self._owner:
            raise RuntimeError("only the thread that opened the lane submits to it")
        if self._closed:
            raise RuntimeError("lane is closed")
        self._submitted += 1
        self._jobs.put((tag, fn, args, kwargs))
        if self._runners < min(self.limit, self.pending):
            self._runners += 1
            self._pool.reserve(1)
            self._pool.put(self._run)

    def get(self, timeout: float | None = None) -> tuple[Any, Any, BaseException | None]:
        """The next finished job as ``(tag, result, exception)``; ``queue.Empty`` after ``timeout``."""
        done = self._out.get(timeout=timeout)
        self._collected += 1
        return done

    def close(self) -> None:
        """Drop the jobs not started and give the threads back; jobs in flight finish on their own
        (their results are discarded)."""
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in range(self._runners):
            self._jobs.put(None)
        self._pool.release(self._runners)

    def _run(self) -> None:
        self._started.append(None)
        jobs, out = self._jobs, self._out
        while (job := jobs.get()) is not None:
            tag, fn, args, kwargs = job
            try:
                done: tuple[Any, Any, BaseException | None] = (tag, fn(*args, **kwargs), None)
            except BaseException as exc:  # delivered to the coordinating thread, which decides
                done = (tag, None, exc)
            out.put(done)
            del job, tag, fn, args, kwargs, done  # nothing of a finished job kept while waiting
