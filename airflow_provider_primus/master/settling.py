"""What an executor's end, hang or report means for the job, and stopping them all.

An ended executor is settled once: its telemetry and its data-service registration are forgotten,
and its role decides whether it restarts, is abandoned (the role goes on with fewer) or fails the job
(a trainer through its group, master/trainers.py; the others through their failover,
master/executors.py). A hung one (running, not progressing: master/liveness.py) is fenced out of the
data service, killed and settled like a crash, so its hang counts against ``max_restarts`` and one
that hangs every time fails the job, saying so. Stopped executors (a suspend, the job's end) leave the
data service too, so their work is handed out again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import RUNNING, Executor, Executors
from airflow_provider_primus.master.liveness import Liveness
from airflow_provider_primus.master.savepoints import Savepoints
from airflow_provider_primus.master.scaling import Scaling
from airflow_provider_primus.master.telemetry import Telemetry
from airflow_provider_primus.master.trainers import TrainerGroup
from airflow_provider_primus.resources.backend import Observation

__all__ = ["Settling"]


class Settling:
    def __init__(
        self,
        *,
        executors: Executors,
        trainers: TrainerGroup,
        scaling: Scaling,
        telemetry: Telemetry,
        jobdata: JobData,
        savepoints: Savepoints,
        liveness: Liveness,
        events: EventLog,
        applied: dict[str, Any],
        fail: Callable[[str], None],
    ) -> None:
        """``applied``: the master's persisted record of what it acted on (here: the trainer events
        already raised); ``fail``: the master's, failing the job with a message."""
        self.executors, self.trainers, self.scaling = executors, trainers, scaling
        self.telemetry, self.jobdata, self.savepoints = telemetry, jobdata, savepoints
        self.liveness, self.events, self.applied, self.fail = liveness, events, applied, fail

    def settle(self, ex: Executor, obs: Observation) -> None:
        self.telemetry.forget(ex.name)
        if ex.role == "data":
            self.jobdata.dispatcher.forget(ex.service_name)
        # The current dispatcher at each use: a trainer restarting from its checkpoint replaces it.
        outcome = (self.trainers.settle(ex, obs) if ex.role == "trainer" else None) or self.executors.exited(
            ex, obs, data_finished=self.jobdata.dispatcher.finished()
        )
        if outcome.kind == "abandoned":
            self.scaling.replicas[ex.role] = outcome.replicas
        elif outcome.kind == "failed":
            self.fail(outcome.message)

    def reported(self, ex: Executor, report: Mapping[str, Any]) -> None:
        """A trainer's report: the savepoints it covered, the job events it raised and, in the last
        report of one that failed, the error it failed on."""
        if report.get("error"):
            ex.error = str(report["error"])
        self.savepoints.reported(report)
        self.events.from_trainer(
            ex.name, ex.service_name, report, self.applied.setdefault("trainer_events", {})
        )

    def replace_hung(self) -> None:
        """Say why, fence the incarnation out of the data service, kill it and let its role's
        failover restart it."""
        dispatcher, server = self.jobdata.dispatcher, self.jobdata.server
        assert server is not None
        for ex in self.executors.all.values():  # every replaced incarnation stays refused, also
            dispatcher.fence(ex.name, ex.incarnation)  # across a rewind or a master restart
        hung = self.liveness.check(
            self.executors.running(),
            dispatcher.liveness(),
            server.take_reports(),
            work_waiting=dispatcher.work_waiting(),
        )
        for hang in hung:
            ex = hang.executor
            if ex.state != RUNNING:  # settled meanwhile (a group restart stopped it)
                continue
            self.events.emit(
                EventType.EXECUTOR_HUNG,
                f"{ex.name} hung: {hang.why}; replacing it",
                ex.name,
                {"reason": hang.why, "silent_s": round(hang.silent_s, 1), "incarnation": ex.incarnation},
            )
            dispatcher.fence(ex.name, ex.incarnation + 1)
            self.executors.kill(ex)
            self.settle(ex, Observation(ex.name, time.monotonic(), False, reason=f"hung: {hang.why}"))

    def stop_all(self) -> None:
        for ex in self.executors.stop_all():
            self.jobdata.dispatcher.forget(ex.service_name)
