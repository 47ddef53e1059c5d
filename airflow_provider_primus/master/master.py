"""The training master: one process per job, reconciling the job object against its executors.

Each pass reads the job object (spec + desired), observes the executors, and converges, in the way of
a controller-runtime reconciler: idempotent passes, everything a pass needs in the store, the status
written by this one owner. The work is done by collaborators, one reason to change each: executor
lifecycle (``executors``), scaling (``scaling``), the job's data and data service (``dataservice``),
observation (``telemetry``), executors' ends and hangs (``settling``), savepoints (``savepoints``),
events (``events``), status assembly (``status``) and publication (``publish``) and the control API
(``api``, served by ``serving``). A restarted master takes over what its predecessor's status holds
(``resume``): it re-adopts the executors launched before (same PIDs or pods, no duplicates) and its
dispatcher resumes from the progress persisted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.job import stored_job
from airflow_provider_primus.contracts.loader import load_data_spec, load_training_spec
from airflow_provider_primus.contracts.status import Desired, EventType, JobStatus, Phase
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.errors import TerminalError
from airflow_provider_primus.master.api import JobControl
from airflow_provider_primus.master.commands import executor_command
from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import Executors
from airflow_provider_primus.master.jobs import job_paths, read_token
from airflow_provider_primus.master.liveness import Liveness
from airflow_provider_primus.master.metrics import JobMetrics
from airflow_provider_primus.master.passes import PassFailures, record_failed_pass, record_recovery
from airflow_provider_primus.master.publish import MasterError, StatusPublisher
from airflow_provider_primus.master.resume import Resumed
from airflow_provider_primus.master.savepoints import Savepoints
from airflow_provider_primus.master.scaling import Scaling
from airflow_provider_primus.master.serving import serve_api
from airflow_provider_primus.master.settling import Settling
from airflow_provider_primus.master.status import job_status
from airflow_provider_primus.master.store import JobNotFound, JobStore, SqliteJobStore
from airflow_provider_primus.master.store_health import StoreHealth
from airflow_provider_primus.master.telemetry import Telemetry
from airflow_provider_primus.master.trainers import TrainerGroup
from airflow_provider_primus.resources.backend import Allotment, Backend
from airflow_provider_primus.resources.local import LocalBackend
from airflow_provider_primus.tls import JobCa

log = logging.getLogger(__name__)

__all__ = ["Master", "MasterError"]


class Master:
    def __init__(
        self,
        name: str,
        store: JobStore,
        *,
        backend: Backend | None = None,
        home: Path | None = None,
        tick_s: float = 0.5,
        on_status: Callable[[dict[str, Any]], None] | None = None,
        token: str | None = None,
        backend_factory: Callable[[Master], Backend] | None = None,
    ) -> None:
        self.name, self.store, self.tick_s = name, store, tick_s
        record = store.get(name)
        self.job = stored_job(record.spec)
        self.data = load_data_spec(self.job.spec.data)
        if self.job.spec.training:  # refused here, not by a trainer that would fail on it repeatedly
            load_training_spec(self.job.spec.training)
        self.paths = job_paths(name, home)
        self.paths.executors.mkdir(parents=True, exist_ok=True)
        self.token = token or read_token(name, home)
        # The job's CA (made at submission) when the job serves TLS: the dispatcher and the API
        # issue their certificates from it, executors get its folder in their environment.
        self.ca = JobCa.read(self.paths.tls) if self.job.spec.tls else None
        self.wake = threading.Event()
        self.events = EventLog(store, name)
        self.pass_times: deque[float] = deque(maxlen=1000)  # seconds per reconcile pass (benchmarks)
        resumed = Resumed.take_over(name, record.status)
        previous = resumed.status
        self.phase, self.message, self.suspended = previous.phase, "", previous.suspended
        self.applied: dict[str, Any] = dict(previous.applied)
        if backend is None and backend_factory is not None:
            try:
                backend = backend_factory(self)
            except TerminalError as exc:  # nothing will ever run: say so in the status
                message = f"the {self.job.spec.backend.type} backend cannot run this job: {exc}"
                StatusPublisher(store, name, on_status).failed(previous, message, {})
                self.events.emit(EventType.FAILED, message)
                raise MasterError(message) from exc
        local = self.job.spec.backend.local
        self.backend = backend or LocalBackend(
            self.paths.executors, on_event=self.backend_event,
            python=local.python if local else None, paths=local.paths if local else (),
        )  # fmt: skip
        self.executors = Executors(
            self.job, self.backend, self.events, token=self.token, exit_dir=self.paths.executors,
            command_for=self._command, known=resumed.executors(),
            tls_dir=self.paths.tls if self.ca else None,
        )  # fmt: skip
        self.scaling = Scaling(self.job, self.executors, self.events, applied=self.applied, previous=previous)
        self.trainers = TrainerGroup(
            self.executors, self.events, self.scaling.replicas, applied=self.applied,
            send_command=self._send_command,
        )  # fmt: skip
        self.telemetry = Telemetry(previous.progress.trainer_report)
        self.savepoints = Savepoints(self.events, resumed.savepoints())
        self.publisher = StatusPublisher(store, name, on_status)
        self.jobdata = JobData(
            self.job, self.data, self.events, windows=resumed.windows(), progress=previous.data_progress
        )
        try:
            self.server = self.jobdata.start(self.token, resumed.dispatcher_port, self.ca)
        except Exception as exc:  # the data cannot be planned: nothing will ever run
            message = self.jobdata.planning_failure(exc)
            self._fail_at_start(previous, message)
            raise MasterError(message) from exc
        self.control = JobControl(store, name, self.wake, self.data)
        metrics = JobMetrics(name, self.control.status_view, self.events.counts)
        self.api = serve_api(
            self.control, self.token, metrics, listen=self.job.spec.control, port=resumed.api_port,
            ca=self.ca, tls_dir=self.paths.tls,
        )  # fmt: skip
        self.restarted = resumed.restarted
        # Executors a previous master launched were seen by it: their hang clock starts now.
        self.liveness = Liveness(self.job, adopted=self.executors.live())
        self.settling = Settling(
            executors=self.executors, trainers=self.trainers, scaling=self.scaling,
            telemetry=self.telemetry, jobdata=self.jobdata, savepoints=self.savepoints,
            liveness=self.liveness, events=self.events, applied=self.applied, fail=self._fail,
        )  # fmt: skip
        for ex in self.executors.adopt_all():
            self.settling.settle(ex, self.executors.lost_while_away(ex))
        verb = "restarted" if self.restarted else "started"
        self.events.emit(
            EventType.MASTER_STARTED, f"master {verb} (pid {os.getpid()}), control API {self.api.url}"
        )

    def _fail_at_start(self, previous: JobStatus, message: str) -> None:
        """The job fails with the reason in its status, where `primus submit`, `primus status` and
        the Airflow operator look (not only as a traceback in master.log). A restarted master's
        executors are stopped: without a plan nothing can feed or judge them."""
        self.phase, self.message = Phase.FAILED, message
        self.executors.terminate_adopted()
        self.publisher.failed(
            previous, message, {n: e.to_dict() for n, e in sorted(self.executors.all.items())}
        )
        self.events.emit(EventType.FAILED, message)
        self.backend.close()

    def _command(self, role: str, service_name: str, index: int) -> list[str]:
        group = self.trainers.command_fields(index) if role == "trainer" else None
        return executor_command(self.job, self.paths, self.server.location, role, service_name, group=group)

    def _send_command(self, executor: str, command: dict[str, Any]) -> None:
        self.server.send_command(executor, command)

    @property
    def dispatcher(self) -> Dispatcher:
        """The data service's current dispatcher (a restarted trainer rewinds it to its checkpoint)."""
        return self.jobdata.dispatcher

    def request(self, change: dict[str, Any]) -> dict[str, Any]:
        """Record a request (scale, resize, window, savepoint, suspend, stop) for the next pass."""
        return self.control.request(change)

    def backend_event(self, type_: str, executor: str, data: dict[str, Any]) -> None:
        """From the backend's watchdog thread: queued, written by the loop."""
        self.events.queue(type_, str(data.get("reason") or data.get("message") or type_), executor, data)
        self.wake.set()

    def run(self) -> str:
        failing, health = PassFailures(), StoreHealth(self.store, self.name)
        try:
            while not self.phase.terminal:
                self.wake.clear()
                try:
                    self.reconcile()
                    failing.clear()
                    if (stale := health.recovered()) is not None:
                        record_recovery(self.events, *stale)
                except JobNotFound:  # the job object was deleted (Kubernetes: a cancel): stop it all
                    self.phase, self.message = Phase.STOPPED, "the job object was deleted"
                    log.info("job %s deleted: stopping its executors", self.name)
                    break
                except TerminalError as exc:  # no retry can help: fail now, saying why
                    log.error("the backend cannot go on: %s", exc)
                    self._fail(f"the {self.job.spec.backend.type} backend cannot go on: {exc}")
                    break
                except Exception as exc:  # one bad pass must not take a long-running job down
                    log.exception("reconcile pass failed")
                    health.failed(exc)  # readers say the status is stale, and why
                    if failing.add():
                        self._fail(f"{failing.summary()}; last: {exc!r}")
                        break
                    record_failed_pass(self.events, exc)
                if self.phase.terminal:
                    break
                self.wake.wait(failing.backoff(self.tick_s))
        finally:
            self.close()
        return self.phase

    def reconcile(self) -> None:
        started = time.perf_counter()
        try:
            self._reconcile()
        finally:
            self.pass_times.append(time.perf_counter() - started)

    def _reconcile(self) -> None:
        for notice in self.store.take_notices() if isinstance(self.store, SqliteJobStore) else []:
            self.events.emit(EventType.STORE_RECREATED, notice)
        self.events.flush()
        self._apply_desired(self.store.get(self.name).job_desired)
        if not self.phase.terminal:
            live, settling = self.executors.live(), self.settling
            for ex, obs in self.telemetry.observe(live, self.backend, self.server, settling.reported):
                settling.settle(ex, obs)
        if not self.phase.terminal and not self.suspended:  # running but not progressing: replaced
            self.settling.replace_hung()
        if not self.phase.terminal:
            self.savepoints.send(self.executors.running("trainer"), self.server.send_command)
        self.jobdata.report_quarantine()
        if not self.phase.terminal and self.dispatcher.failed():
            self._fail(self.dispatcher.failure_message())
        if not self.phase.terminal and not self.suspended:
            self.scaling.autoscale(list(self.telemetry.samples))
            data_done = self.dispatcher.finished() or not self.jobdata.files_sources
            self.scaling.converge(data_done=data_done)
            trainer = self.job.spec.roles.trainer.resources
            self.trainers.converge(Allotment(trainer.cpu, trainer.memory))
            self._check_done()
        if not self.phase.terminal:
            self.scaling.publish(self.store, self.name)
        if self.phase.terminal:
            self.settling.stop_all()
            self.savepoints.settle(self.phase, self.telemetry.trainer_report)
        elif self.suspended:
            self.phase = Phase.SUSPENDED
        elif self.phase in (Phase.PENDING, Phase.SUSPENDED):
            self.phase = Phase.RUNNING
        self._write_status()

    def _apply_desired(self, desired: Desired) -> None:
        if desired.stop and not self.phase.terminal:
            self.phase, self.message = Phase.STOPPED, "stopped on request"
            self.events.emit(EventType.STOPPED, "stop requested")
            return
        suspend = desired.suspend
        if suspend != self.suspended:
            self.suspended = suspend
            self.events.emit(
                EventType.SUSPENDED if suspend else EventType.RESUMED,
                f"{'suspend' if suspend else 'resume'} requested",
            )
            if suspend:
                self.settling.stop_all()
        self.scaling.apply_requests(desired)
        self.jobdata.append([w.model_dump(exclude_unset=True) for w in desired.windows])
        self.savepoints.record(desired.savepoints)

    def _check_done(self) -> None:
        if self.trainers.finished():
            self.phase, self.message = Phase.SUCCEEDED, self.jobdata.succeeded()

    def _fail(self, message: str) -> None:
        self.phase, self.message = Phase.FAILED, message
        self.events.emit(EventType.FAILED, message)

    def _write_status(self) -> None:
        self.publisher.publish(job_status(self))

    def close(self) -> None:
        if self.phase.terminal:
            self.settling.stop_all()
        try:
            if self.phase.terminal:  # requests accepted since the last pass are answered too
                with contextlib.suppress(JobNotFound):
                    self.savepoints.record(self.store.get(self.name).job_desired.savepoints)
                self.savepoints.settle(self.phase, self.telemetry.trainer_report)
            self._write_status()
        except Exception:
            log.exception("final status write")
        self.api.stop()
        self.jobdata.stop()
        self.backend.close()
        self.store.close()  # this thread's connection, or the informer's watch threads
