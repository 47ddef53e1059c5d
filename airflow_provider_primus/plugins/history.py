"""What the job pages chart over time.

The master keeps each job's figures over time in its status (``master/history.py``: a point every
20 s, bounded, downsampled when old), so every API-server worker draws the same history and a
restart of the API server (or of the master) loses none of it. Between two of those points the
pages add what they saw themselves: ``History`` keeps the points of every ``status.updated`` seen,
fed by page views and by a background ``Sampler`` that polls the running jobs, for the charts'
latest seconds at full resolution.

Scaling events *are* stored (the event log is append-only), so their history is exact; it is read
incrementally (only events after the last sequence number seen) and the relevant kinds are kept.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_primus.contracts.status import TERMINAL, JobStatus
from airflow_provider_primus.master.history import Point, point_from_dict, point_from_status
from airflow_provider_primus.master.store import Event, JobRecord, JobStore
from airflow_provider_primus.plugins.status import read_status

log = logging.getLogger(__name__)

# Events the scaling timeline shows, and the executor lifecycle the allotment charts replay.
SCALING_EVENTS = (
    "ScaleDecision",
    "ScaleRequested",
    "Resized",
    "ExecutorLaunched",
    "ExecutorFailed",
    "ExecutorRemoved",
    "ExecutorLost",
    "ExecutorAbandoned",
    "MemoryPressure",
    "MemoryLimit",
)
LIFECYCLE_EVENTS = (*SCALING_EVENTS, "ExecutorAdopted", "TrainerCompleted", "MasterStarted")


@dataclass
class _Job:
    created: float
    points: deque[Point]
    events: deque[Event]
    after_seq: int = 0


class History:
    """Bounded per-job series (``max_points`` each, ``max_jobs`` jobs, least recently seen dropped)."""

    def __init__(self, max_points: int = 720, max_events: int = 500, max_jobs: int = 200) -> None:
        self.max_points, self.max_events, self.max_jobs = max_points, max_events, max_jobs
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._lock = threading.Lock()

    def _job(self, record: JobRecord) -> _Job:
        job = self._jobs.get(record.name)
        if job is None or job.created != record.created:  # a new job under an old name
            job = _Job(record.created, deque(maxlen=self.max_points), deque(maxlen=self.max_events))
            self._jobs[record.name] = job
        self._jobs.move_to_end(record.name)
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        return job

    def jobs(self) -> list[str]:
        """The jobs with a history, least recently seen first."""
        with self._lock:
            return list(self._jobs)

    def observe(self, record: JobRecord, status: JobStatus | None = None) -> list[Point]:
        """Add the record's status (once per ``updated``) and return the job's series: the master's
        durable history, then what this process saw after its last point. ``status``: the record's,
        when the caller has read it already (a page, which draws it too)."""
        status = read_status(record) if status is None else status
        point = point_from_status(status)
        durable = [p for p in map(point_from_dict, status.history) if p]
        with self._lock:
            job = self._job(record)
            if point is not None and (not job.points or point.t > job.points[-1].t):
                job.points.append(point)
            since = durable[-1].t if durable else float("-inf")
            return [*durable, *(p for p in job.points if p.t > since)]

    def events(self, store: JobStore, record: JobRecord, page: int = 1000) -> list[Event]:
        """The job's scaling and lifecycle events, read from the store since the last call."""
        with self._lock:
            job = self._job(record)
            while True:
                batch = store.events(record.name, after=job.after_seq, limit=page)
                for event in batch:
                    if event.type in LIFECYCLE_EVENTS:
                        job.events.append(event)
                if batch:
                    job.after_seq = batch[-1].seq
                if len(batch) < page:
                    return list(job.events)


class Sampler:
    """Polls every job that has not ended, every ``interval_s``, into ``history`` (daemon thread)."""

    def __init__(self, history: History, store: Callable[[], JobStore | None], interval_s: float) -> None:
        self.history, self.store, self.interval_s = history, store, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name="primus-ui-sampler", daemon=True)
                self._thread.start()

    def sample(self) -> None:
        store = self.store()
        if store is None:
            return
        for record in store.find():
            if record.status.get("phase") not in TERMINAL:
                self.history.observe(record)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a locked or replaced store file: try again next time
                log.exception("sampling the job store")

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
