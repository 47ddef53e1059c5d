"""The training master: one process per job, reconciling the job object against its executors.

Each pass reads the job object (spec + desired), observes the executors, and converges, in the way of
a controller-runtime reconciler: idempotent passes, everything a pass needs in the store, the status
written by this one owner. The work is done by collaborators, one reason to change each: executor
lifecycle (``executors``), scaling (``scaling``), the job's data and data service (``dataservice``),
observation (``telemetry``), savepoints (``savepoints``), events (``events``), status publication
(``publish``) and the control API (``api``). A restarted master re-adopts the executors its
predecessor launched (same PIDs or pods, no duplicates) and its dispatcher resumes from the progress
its predecessor persisted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_provider_primus.data.service.auth import advertised_host, bind_host
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.errors import TerminalError
from airflow_provider_primus.master.api import ApiServer, JobControl, create_app
from airflow_provider_primus.master.commands import executor_command
from airflow_provider_primus.master.dataservice import JobData
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import RUNNING, Executor, Executors
from airflow_provider_primus.master.jobs import job_paths, read_token
from airflow_provider_primus.master.liveness import Liveness
from airflow_provider_primus.master.metrics import JobMetrics, render
from airflow_provider_primus.master.passes import PassFailures
from airflow_provider_primus.master.publish import (
    JobEndedError,
    MasterError,
    StatusPublisher,
    job_status,
    refuse_second_master,
)
from airflow_provider_primus.master.savepoints import Savepoints
from airflow_provider_primus.master.scaling import Scaling
from airflow_provider_primus.master.store import JobNotFound, JobStore, SqliteJobStore
from airflow_provider_primus.master.store_health import StoreHealth
from airflow_provider_primus.master.telemetry import Telemetry
from airflow_provider_primus.master.trainers import TrainerGroup
from airflow_provider_primus.resources.backend import Allotment, Backend, Observation
from airflow_provider_primus.resources.local import LocalBackend
from airflow_provider_primus.spec.job import PrimusJob
from airflow_provider_primus.spec.loader import load_data_spec, load_training_spec
from airflow_provider_primus.spec.status import EventType, Phase
from airflow_provider_primus.tls import JobCa, write_private

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
        self.job = PrimusJob.model_validate(record.spec)
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
        previous = record.status
        self.phase = Phase(previous.get("phase") or Phase.PENDING)
        if self.phase.terminal:
            raise JobEndedError(name, self.phase.value)
        refuse_second_master(name, previous.get("master") or {})
        self.message, self.suspended = "", bool(previous.get("suspended", False))
        self.applied: dict[str, Any] = dict(previous.get("applied") or {})
        if backend is None and backend_factory is not None:
            try:
                backend = backend_factory(self)
            except TerminalError as exc:  # nothing will ever run: say so in the status
                message = f"the {self.job.spec.backend.type} backend cannot run this job: {exc}"
                StatusPublisher(store, name, on_status).failed(previous, message, {})
                self.events.emit(EventType.FAILED, message)
                raise MasterError(message) from exc
        self.backend = backend or LocalBackend(self.paths.executors, on_event=self.backend_event)
        known = previous.get("executors") or {}
        self.executors = Executors(
            self.job, self.backend, self.events, token=self.token, exit_dir=self.paths.executors,
            command_for=self._command, known=known,
            tls_dir=self.paths.tls if self.ca else None,
        )  # fmt: skip
        self.scaling = Scaling(self.job, self.executors, self.events, applied=self.applied, previous=previous)
        self.trainers = TrainerGroup(
            self.executors,
            self.events,
            self.scaling.replicas,
            applied=self.applied,
            send_command=self._send_command,
        )
        self.telemetry = Telemetry((previous.get("progress") or {}).get("trainer_report") or {})
        self.savepoints = Savepoints(self.events, previous.get("savepoints") or {})
        self.publisher = StatusPublisher(store, name, on_status)
        windows, progress = list(previous.get("windows") or []), previous.get("data_progress") or {}
        self.jobdata = JobData(self.job, self.data, self.events, windows=windows, progress=progress)
        master = previous.get("master") or {}
        try:
            self.server = self.jobdata.start(self.token, int(master.get("dispatcher_port") or 0), self.ca)
        except Exception as exc:  # the data cannot be planned: nothing will ever run
            message = self.jobdata.planning_failure(exc)
            self._fail_at_start(previous, message)
            raise MasterError(message) from exc
        listen, self.control = self.job.spec.control, JobControl(store, name, self.wake, self.data)
        collector = JobMetrics(name, self.control.status_view, self.events.counts)
        app = create_app(self.control, self.token, metrics=lambda: render(collector))
        host = bind_host(listen.host)
        self.api = ApiServer(
            app,
            host,
            int(master.get("api_port") or listen.port),
            tls=self._api_certificate(host),
            advertise=advertised_host(host),
        ).start()
        self.restarted = bool(master)
        # Executors a previous master launched were seen by it: their hang clock starts now.
        self.liveness = Liveness(self.job, adopted=self.executors.live())
        for ex in self.executors.adopt_all():
            self._settle(ex, self.executors.lost_while_away(ex))
        verb = "restarted" if self.restarted else "started"
        self.events.emit(
            EventType.MASTER_STARTED, f"master {verb} (pid {os.getpid()}), control API {self.api.url}"
        )

    def _api_certificate(self, host: str) -> tuple[Path, Path] | None:
        """The control API's certificate and key, issued afresh for the address it serves on and
        written 0600 beside the CA (uvicorn reads files)."""
        if self.ca is None:
            return None
        cert, key = self.ca.issue([advertised_host(host)])
        files = (self.paths.tls / "api.crt", self.paths.tls / "api.key")
        write_private(files[1], key)
        write_private(files[0], cert)
        return files

    def _fail_at_start(self, previous: Mapping[str, Any], message: str) -> None:
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
                        self._recovered(*stale)
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
                    try:  # the event goes to the same store that may be what is failing
                        self.events.emit(EventType.RECONCILE_ERROR, f"{type(exc).__name__}: {exc}")
                    except Exception:
                        log.exception("recording the failed pass")
                if self.phase.terminal:
                    break
                self.wake.wait(failing.backoff(self.tick_s))
        finally:
            self.close()
        return self.phase

    def _recovered(self, held_s: float, failures: int) -> None:
        """Passes succeed again: the stored status is current once more; say how long it was not."""
        message = f"the job's status is current again after {failures} failed pass(es) over {held_s:.0f} s"
        try:
            self.events.emit(EventType.STORE_RECOVERED, message)
        except Exception:
            log.exception("recording the recovery")

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
        self._apply_desired(self.store.get(self.name).desired)
        if not self.phase.terminal:
            ended = self.telemetry.observe(self.executors.live(), self.backend, self.server, self._reported)
            for ex, obs in ended:
                self._settle(ex, obs)
        if not self.phase.terminal and not self.suspended:
            self._replace_hung()
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
            self._stop_all()
            self.savepoints.settle(self.phase, self.telemetry.trainer_report)
        elif self.suspended:
            self.phase = Phase.SUSPENDED
        elif self.phase in (Phase.PENDING, Phase.SUSPENDED):
            self.phase = Phase.RUNNING
        self._write_status()

    def _apply_desired(self, desired: Mapping[str, Any]) -> None:
        if desired.get("stop") and not self.phase.terminal:
            self.phase, self.message = Phase.STOPPED, "stopped on request"
            self.events.emit(EventType.STOPPED, "stop requested")
            return
        suspend = bool(desired.get("suspend", False))
        if suspend != self.suspended:
            self.suspended = suspend
            self.events.emit(
                EventType.SUSPENDED if suspend else EventType.RESUMED,
                f"{'suspend' if suspend else 'resume'} requested",
            )
            if suspend:
                self._stop_all()
        self.scaling.apply_requests(desired)
        self.jobdata.append(list(desired.get("windows", [])))
        self.savepoints.record(desired.get("savepoints", []))

    def _reported(self, ex: Executor, report: Mapping[str, Any]) -> None:
        """A trainer's report: the savepoints it covered, the job events it raised and, in the last
        report of one that failed, the error it failed on."""
        if report.get("error"):
            ex.error = str(report["error"])
        self.savepoints.reported(report)
        self.events.from_trainer(
            ex.name, ex.service_name, report, self.applied.setdefault("trainer_events", {})
        )

    def _settle(self, ex: Executor, obs: Observation) -> None:
        self.telemetry.forget(ex.name)
        if ex.role == "data":
            self.dispatcher.forget(ex.service_name)
        outcome = (self.trainers.settle(ex, obs) if ex.role == "trainer" else None) or self.executors.exited(
            ex, obs, data_finished=self.dispatcher.finished()
        )
        if outcome.kind == "abandoned":
            self.scaling.replicas[ex.role] = outcome.replicas
        elif outcome.kind == "failed":
            self._fail(outcome.message)

    def _replace_hung(self) -> None:
        """Running but not progressing (master/liveness.py): say so, fence the incarnation out of
        the data service, kill it and let its role's failover restart it (the hang counts against
        ``max_restarts``: one that hangs every time fails the job, saying so)."""
        dispatcher = self.dispatcher
        for ex in self.executors.all.values():  # every replaced incarnation stays refused, also
            dispatcher.fence(ex.name, ex.incarnation)  # across a rewind or a master restart
        hung = self.liveness.check(
            self.executors.running(),
            dispatcher.liveness(),
            self.server.take_reports(),
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
            self._settle(ex, Observation(ex.name, time.monotonic(), False, reason=f"hung: {hang.why}"))

    def _check_done(self) -> None:
        if self.trainers.finished():
            self.phase, self.message = Phase.SUCCEEDED, self.jobdata.succeeded()

    def _fail(self, message: str) -> None:
        self.phase, self.message = Phase.FAILED, message
        self.events.emit(EventType.FAILED, message)

    def _stop_all(self) -> None:
        for ex in self.executors.stop_all():
            self.dispatcher.forget(ex.service_name)

    def _write_status(self) -> None:
        self.publisher.publish(
            job_status(
                phase=self.phase,
                message=self.message,
                suspended=self.suspended,
                master={
                    "api": self.api.url,
                    "api_port": self.api.port,
                    "metrics": f"{self.api.url}/metrics",
                    **self.jobdata.endpoint(),
                    # Where the trainer group of this generation meets (its leader's store).
                    "rendezvous": self.server.rendezvous.get(self.trainers.generation),
                    "trainer_generation": self.trainers.generation,
                },
                scaling=self.scaling,
                executors=self.executors,
                telemetry=self.telemetry,
                jobdata=self.jobdata,
                savepoints=self.savepoints,
                applied=self.applied,
                events=self.events,
                selector=f"primus.dev/job={self.name},primus.dev/role=data",
            )
        )

    def close(self) -> None:
        if self.phase.terminal:
            self._stop_all()
        try:
            if self.phase.terminal:  # requests accepted since the last pass are answered too
                with contextlib.suppress(JobNotFound):
                    self.savepoints.record(self.store.get(self.name).desired.get("savepoints", []))
                self.savepoints.settle(self.phase, self.telemetry.trainer_report)
            self._write_status()
        except Exception:
            log.exception("final status write")
        self.api.stop()
        self.jobdata.stop()
        self.backend.close()
        self.store.close()  # this thread's connection, or the informer's watch threads
