"""Whether a running executor is making progress: liveness from what it does, not from its process.

A process can be alive and serve nothing (stopped with SIGSTOP, a node frozen, a reader thread dead
while the heartbeat thread goes on); the backend still reports it running, and with one data
executor nothing else would take its work. So the master judges each running executor by its signs
of life, each pass:

* a **data executor** whose calls to the data service (a heartbeat every second) stopped, or that
  holds no work item and has not asked for one while work waits (a live reader asks within 50 ms);
* a **trainer** whose reports (every 0.5 s, from a thread of their own, also during a step) stopped.

Silent for its role's ``failover.hang_timeout_s`` (data 30 s, trainer 60 s unless set), it is hung.
The clock starts at its first sign of life: starting (a pod pulling its image, a trainer importing
torch) is the backend's to judge, not a hang. An executor adopted by a restarted master counts as
seen at the adoption, and until it first shows life to this master it is given the job's
``data_service.master_grace_s`` if that is longer than its timeout: it keeps retrying the master that
long, and on a cluster it learns the new master's address only as fast as the backend delivers it
(a pod's downward-API file is refreshed on the kubelet's sync period, a minute by default), so a
healthy executor is not replaced for reconnecting at the pace its own grace allows. What is done
with a hung executor (event, fence, kill, restart) is the master's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from airflow_provider_primus.contracts.job import PrimusJob
from airflow_provider_primus.master.executors import Executor

__all__ = ["Hang", "Liveness"]


@dataclass(frozen=True)
class Hang:
    executor: Executor
    why: str  # e.g. "no heartbeat for 30 s"
    silent_s: float


class Liveness:
    def __init__(
        self,
        job: PrimusJob,
        adopted: Iterable[Executor] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job, self.clock = job, clock
        now = clock()
        adopted = list(adopted)
        # service name -> when it last showed life (heartbeat, lease call, report)
        self._seen: dict[str, float] = {e.service_name: now for e in adopted}
        # service name -> until when an adopted executor may still be finding this master
        rejoin = job.spec.data_service.master_grace_s
        self._rejoin: dict[str, float] = {e.service_name: now + rejoin for e in adopted}
        # service name -> since when it has held nothing, not asked, while work waited
        self._starved: dict[str, float] = {}

    def timeout(self, role: str) -> float:
        roles = self.job.spec.roles
        spec = {"data": roles.data, "trainer": roles.trainer}.get(role, roles.evaluator)
        return (spec or roles.data).failover.hang_timeout(role)

    def check(
        self,
        running: Iterable[Executor],
        data: Mapping[str, Mapping[str, float | int]],
        reports: Mapping[str, tuple[float, object]],
        *,
        work_waiting: bool,
    ) -> list[Hang]:
        """The running executors that are hung now. ``data``: the dispatcher's ``liveness()``;
        ``reports``: the trainers' last reports (time received, figures)."""
        now = self.clock()
        hung: list[Hang] = []
        running = list(running)
        for ex in running:
            name = ex.service_name
            timeout = self.timeout(ex.role)
            if ex.role == "data":
                signs = data.get(name)
                if signs is not None:
                    self._note(name, float(signs["seen"]))
                    starved = self._starving(name, signs, work_waiting, now)
                    if starved is not None and now - starved > timeout:
                        hung.append(
                            Hang(ex, f"asked for no work for {timeout:g} s while work waited", now - starved)
                        )
                        continue
            else:
                report = reports.get(name)
                if report is not None:
                    self._note(name, float(report[0]))
            seen = self._seen.get(name)
            if seen is not None and now - seen > timeout and now > self._rejoin.get(name, 0.0):
                what = "heartbeat" if ex.role == "data" else "report"
                hung.append(Hang(ex, f"no {what} for {timeout:g} s", now - seen))
        names = {e.service_name for e in running}
        for known in (self._seen, self._starved, self._rejoin):
            for name in [n for n in known if n not in names]:
                del known[name]
        return hung

    def _note(self, name: str, seen: float) -> None:
        """Keep the newest sign: the dispatcher forgets an executor it reaped or a rewind replaced.
        A sign from before this master adopted it (an old report) does not end its rejoin grace."""
        if name in self._rejoin and seen > self._seen.get(name, seen):
            del self._rejoin[name]  # it found this master: its own timeout applies from now
        self._seen[name] = max(seen, self._seen.get(name, seen))

    def _starving(
        self, name: str, signs: Mapping[str, float | int], work_waiting: bool, now: float
    ) -> float | None:
        """Since when ``name`` has held nothing and not asked for work while work waited (None: it
        holds or asked since, or nothing waits)."""
        if int(signs["holds"]) or not work_waiting:
            self._starved.pop(name, None)
            return None
        since = max(float(signs["asked"]), self._starved.get(name, now))
        self._starved[name] = since
        return since
