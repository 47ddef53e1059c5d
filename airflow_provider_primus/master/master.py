"""The training master: one process per job, reconciling the job object against its executors.

Each pass reads the job object (spec + desired), observes the executors through the backend and the
data service, and converges: restarts failed executors per the failover policy, applies manual and
autoscaler decisions (launch, terminate, resize in place), appends windows, forwards savepoints,
and writes ``status`` — the only writer of it. Passes are idempotent and everything a pass needs is
in the store, so a restarted master re-adopts the executors its predecessor launched (same PIDs, no
duplicates) and its dispatcher resumes from the acknowledged progress it persisted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from airflow_provider_primus.cli.main import EXIT_FILE_ENV
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.service.auth import TOKEN_ENV
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
from airflow_provider_primus.master.api import ApiServer, create_app
from airflow_provider_primus.master.jobs import TERMINAL, job_paths, read_token
from airflow_provider_primus.master.store import JobNotFound, JobStore, modify
from airflow_provider_primus.resources.autoscaler import Decision, RoleView, decide
from airflow_provider_primus.resources.backend import Allotment, Backend, Handle, Observation
from airflow_provider_primus.resources.telemetry import Sample
from airflow_provider_primus.spec.data import FileSource, PrimusData
from airflow_provider_primus.spec.job import PrimusJob, Role
from airflow_provider_primus.spec.loader import load_data_spec, load_training_spec
from airflow_provider_primus.spec.training import default_training

log = logging.getLogger(__name__)

RUNNING, REMOVING, COMPLETED, FAILED, REMOVED = "running", "removing", "completed", "failed", "removed"
LAUNCH_WORKERS = 16  # concurrent launches for a backend that allows them (pod creates)
STATUS_HEARTBEAT_S = 10.0  # an unchanged status is rewritten this often (liveness for readers)
MAX_PASS_ERRORS = 20  # consecutive failed passes (about 10 s) before the job is failed
# An open savepoint is sent to a trainer again after this long: the report answer that carried it
# may have been lost. The trainer ignores one it has already covered (and acknowledges it again).
SAVEPOINT_RESEND_S = 10.0


class MasterError(RuntimeError):
    pass


@dataclass
class Executor:
    handle: Handle
    incarnation: int = 0
    restarts: int = 0
    state: str = RUNNING
    exit_code: int | None = None
    reason: str | None = None

    @property
    def name(self) -> str:
        return self.handle.name

    @property
    def service_name(self) -> str:
        """Its name towards the dispatcher: one per incarnation, so a restarted executor never
        inherits the leases of the one that died."""
        return f"{self.handle.name}.{self.incarnation}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "handle": self.handle.to_dict(),
            "incarnation": self.incarnation,
            "restarts": self.restarts,
            "state": self.state,
            "exit_code": self.exit_code,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Executor:
        return cls(
            Handle.from_dict(d["handle"]),
            int(d["incarnation"]),
            int(d["restarts"]),
            str(d["state"]),
            d.get("exit_code"),
            d.get("reason"),
        )


def _primus() -> list[str]:
    return [sys.executable, "-m", "airflow_provider_primus.cli.main"]


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
        self.name = name
        self.store = store
        record = store.get(name)
        self.job = PrimusJob.model_validate(record.spec)
        spec = self.job.spec
        self.data: PrimusData = load_data_spec(spec.data)
        self.training = (
            load_training_spec(spec.training) if spec.training else default_training(name, self.data)
        )
        self.paths = job_paths(name, home)
        self.paths.executors.mkdir(parents=True, exist_ok=True)
        self.token = token or read_token(name, home)
        if backend is None and backend_factory is not None:
            backend = backend_factory(self)
        if backend is None:
            from airflow_provider_primus.resources.local import LocalBackend

            backend = LocalBackend(self.paths.executors, on_event=self._backend_event)
        self.backend = backend
        self.tick_s = tick_s
        self.on_status = on_status
        self.wake = threading.Event()
        self.samples: deque[Sample] = deque(maxlen=4000)
        self.pass_times: deque[float] = deque(maxlen=1000)  # seconds per reconcile pass (benchmarks)
        self._events_tail: deque[dict[str, Any]] = deque(maxlen=20)
        self._quarantine_reported: set[str] = set()  # tasks whose TaskQuarantined event is written
        self._pending_events: list[tuple[str, str, str | None, dict[str, Any]]] = []
        self._events_lock = threading.Lock()
        self.started = time.monotonic()
        self._warm_since: float | None = None
        previous = record.status
        self._trainer_report: dict[str, Any] = dict(
            (previous.get("progress") or {}).get("trainer_report") or {}
        )
        self.phase: str = previous.get("phase", "Pending")
        if self.phase in TERMINAL:
            raise MasterError(f"job {name!r} already ended: {self.phase}")
        self._refuse_second_master(previous.get("master") or {})
        self.message: str = ""
        self.executors: dict[str, Executor] = {
            n: Executor.from_dict(d) for n, d in (previous.get("executors") or {}).items()
        }
        self.replicas: dict[str, int] = dict(previous.get("replicas") or {})
        self.replicas.setdefault("data", spec.roles.data.replicas.start)
        self.replicas.setdefault("trainer", spec.roles.trainer.replicas.start)
        self.decisions: list[Decision] = [Decision.from_dict(d) for d in previous.get("decisions") or []]
        self.windows: list[dict[str, Any]] = list(previous.get("windows") or [])
        self.savepoints: dict[str, dict[str, Any]] = dict(previous.get("savepoints") or {})
        # (trainer service name, savepoint id) -> when it was last sent; not persisted, so a
        # restarted master sends every open savepoint again (its predecessor's queue died with it).
        self._savepoints_sent: dict[tuple[str, str], float] = {}
        self.applied: dict[str, Any] = dict(previous.get("applied") or {})
        self._last_write: tuple[str, float] = ("", 0.0)
        self.suspended = bool(previous.get("suspended", False))
        try:
            self.server = self._start_data_service(previous)
        except Exception as exc:  # the data cannot be planned: nothing will ever run
            source = self._files_source()
            where = f"source {source.name!r} ({source.uri})" if source is not None else "the job's data"
            message = f"planning {where} failed: {type(exc).__name__}: {exc}"
            self._fail_at_start(previous, message)
            raise MasterError(message) from exc
        master = previous.get("master") or {}
        app = create_app(self, self.token)
        self.api = ApiServer(app, spec.control.host, int(master.get("api_port") or spec.control.port)).start()
        self.restarted = bool(master)
        self._adopt()
        self._event(
            "MasterStarted",
            f"master {'re' if self.restarted else ''}started (pid {os.getpid()}), control API {self.api.url}",
        )

    # --- set-up -----------------------------------------------------------------------------------

    def _refuse_second_master(self, master: Mapping[str, Any]) -> None:
        pid, created = master.get("pid"), master.get("pid_created")
        if not pid or pid == os.getpid():
            return
        try:
            same = abs(psutil.Process(int(pid)).create_time() - float(created or 0)) < 0.01
        except psutil.Error:
            return
        if same:
            raise MasterError(f"job {self.name!r} already has a running master (pid {pid})")

    def _fail_at_start(self, previous: Mapping[str, Any], message: str) -> None:
        """The job fails with the reason in its status, where `primus submit`, `primus status` and
        the Airflow operator look (not only as a traceback in master.log). A restarted master's
        executors are stopped: without a plan nothing can feed or judge them."""
        self.phase, self.message = "Failed", message
        for ex in self.executors.values():
            if ex.state in (RUNNING, REMOVING):
                with contextlib.suppress(Exception):
                    if self.backend.adopt(ex.handle):
                        self.backend.terminate(ex.handle)
                ex.state = REMOVED
        status = {
            **previous,
            "phase": self.phase,
            "message": message,
            "executors": {n: e.to_dict() for n, e in sorted(self.executors.items())},
            "updated": time.time(),
        }
        modify(self.store, self.name, lambda _r: status, part="status")
        self._event("Failed", message)
        self.backend.close()

    def _files_source(self) -> FileSource | None:
        return next((s for s in self.data.spec.sources if isinstance(s, FileSource)), None)

    def _plan(self, start: Any, end: Any) -> tuple[list[Task], list[tuple[str, str]]]:
        if self._files_source() is None:
            return [], []
        graph = plan(self.data, start, end)
        for missing in graph.missing:
            self._event("PartitionMissing", f"missing partition {missing.path}")
        return list(graph.tasks), list(graph.edges)

    @property
    def dispatcher(self) -> Dispatcher:
        """The server's current dispatcher (a restarted trainer rewinds it to its checkpoint)."""
        return self.server.dispatcher

    def _start_data_service(self, previous: Mapping[str, Any]) -> DispatcherServer:
        spec = self.job.spec
        window = self.data.spec.window
        tasks, edges = self._plan(window.start, window.end) if window is not None else ([], [])
        for w in self.windows:
            more, more_edges = self._plan(w["start"], w["end"])
            tasks += more
            edges += more_edges
        progress = {t: [tuple(r) for r in rs] for t, rs in (previous.get("data_progress") or {}).items()}
        ds = spec.data_service
        dispatcher = Dispatcher(
            tasks,
            edges,
            progress=progress,
            max_attempts=ds.max_attempts,
            max_failed_share=ds.max_failed_share,
            sealed=not spec.follow,
        )
        port = int((previous.get("master") or {}).get("dispatcher_port") or 0)
        return DispatcherServer(dispatcher, self.token, host=spec.control.host, port=port).start()

    def _adopt(self) -> None:
        for ex in self.executors.values():
            if ex.state not in (RUNNING, REMOVING):
                continue
            if self.backend.adopt(ex.handle):
                where = ex.handle.ref.get("pod") or f"pid {ex.handle.ref.get('pid')}"
                self._event("ExecutorAdopted", f"re-adopted {ex.name} ({where})", ex.name)
                if ex.state == REMOVING:  # the previous master's stop request died with it
                    threading.Thread(target=self.backend.terminate, args=(ex.handle,), daemon=True).start()
            else:
                self._event("ExecutorLost", f"{ex.name} ended while the master was away", ex.name)
                self._on_exit(
                    ex, Observation(ex.name, time.monotonic(), False, reason="ended while no master ran")
                )

    # --- control API (called from the API thread) ---------------------------------------------------

    def status_view(self) -> dict[str, Any]:
        status = dict(self.store.get(self.name).status)
        status.pop("data_progress", None)
        return status

    def events_view(self, after: int, limit: int) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.store.events(self.name, after, limit)]

    def request(self, change: dict[str, Any]) -> dict[str, Any]:
        def apply(record: Any) -> dict[str, Any]:
            desired = dict(record.desired)
            if "scale" in change:
                desired["scale"] = {**desired.get("scale", {}), **change["scale"]}
                desired["scale_gen"] = int(desired.get("scale_gen", 0)) + 1
            if "window" in change:
                windows = list(desired.get("windows", []))
                if change["window"] not in windows:
                    windows.append(change["window"])
                desired["windows"] = windows
            if "resize" in change:
                desired["resize"] = {**desired.get("resize", {}), **change["resize"]}
                desired["resize_gen"] = int(desired.get("resize_gen", 0)) + 1
            if "savepoint" in change:
                desired["savepoints"] = [*desired.get("savepoints", []), change["savepoint"]]
            for key in ("suspend", "stop"):
                if key in change:
                    desired[key] = change[key]
            return desired

        record = modify(self.store, self.name, apply)
        self.wake.set()
        return {"accepted": True, "request": change, "version": record.version}

    # --- events -------------------------------------------------------------------------------------

    def _backend_event(self, type_: str, executor: str, data: dict[str, Any]) -> None:
        """From the backend's watchdog thread: queued, written by the loop."""
        with self._events_lock:
            message = str(data.get("reason") or data.get("message") or type_)
            self._pending_events.append((type_, message, executor, data))
        self.wake.set()

    def _event(
        self, type_: str, message: str, executor: str | None = None, data: dict[str, Any] | None = None
    ) -> None:
        event = self.store.add_event(self.name, type_, message, executor, data)
        self._events_tail.append(event.to_dict())
        log.info("%s %s", type_, message)

    # --- the loop -----------------------------------------------------------------------------------

    def run(self) -> str:
        errors = 0
        try:
            while self.phase not in TERMINAL:
                self.wake.clear()
                try:
                    self.reconcile()
                    errors = 0
                except JobNotFound:  # the job object was deleted (Kubernetes: a cancel): stop it all
                    self.phase, self.message = "Stopped", "the job object was deleted"
                    log.info("job %s deleted: stopping its executors", self.name)
                    break
                except Exception as exc:  # one bad pass must not take a long-running job down
                    errors += 1
                    log.exception("reconcile pass failed")
                    if errors >= MAX_PASS_ERRORS:
                        self._fail(f"{errors} reconcile passes in a row failed; last: {exc!r}")
                        break
                    self._event("ReconcileError", f"{type(exc).__name__}: {exc}")
                if self.phase in TERMINAL:
                    break
                self.wake.wait(self.tick_s)
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
        with self._events_lock:
            pending, self._pending_events = self._pending_events, []
        for type_, message, executor, data in pending:
            self._event(type_, message, executor, data)
        desired = self.store.get(self.name).desired
        self._apply_desired(desired)
        if self.phase not in TERMINAL:
            self._observe()
        if self.phase not in TERMINAL:
            self._send_savepoints()
        self._report_quarantine()
        if self.phase not in TERMINAL and self.dispatcher.failed():
            self._fail(self.dispatcher.failure_message())
        if self.phase not in TERMINAL and not self.suspended:
            self._autoscale()
            self._converge()
            self._check_done()
        if self.phase not in TERMINAL:
            self._publish_scale()
        if self.phase in TERMINAL:
            self._stop_all()
            self._settle_savepoints()
        elif self.suspended:
            self.phase = "Suspended"
        elif self.phase in ("Pending", "Suspended"):
            self.phase = "Running"
        self._write_status()

    def _apply_desired(self, desired: Mapping[str, Any]) -> None:
        if desired.get("stop") and self.phase not in TERMINAL:
            self.phase, self.message = "Stopped", "stopped on request"
            self._event("Stopped", "stop requested")
            return
        suspend = bool(desired.get("suspend", False))
        if suspend != self.suspended:
            self.suspended = suspend
            self._event(
                "Suspended" if suspend else "Resumed", "suspend requested" if suspend else "resume requested"
            )
            if suspend:
                self._stop_all()
        gen = int(desired.get("scale_gen", 0))
        scale = dict(desired.get("scale") or {})
        # A request through the control API bumps scale_gen; the Kubernetes scale subresource
        # (kubectl scale, an HPA) only writes scale.data, so a changed value counts as a request too.
        requested = gen > int(self.applied.get("scale_gen", 0))
        if requested or scale != self.applied.get("scale", {}):
            for role, replicas in scale.items():
                changed = replicas != self.applied.get("scale", {}).get(role)
                if requested or (changed and replicas != self.replicas.get(role)):
                    self._manual_scale(role, int(replicas))
            self.applied["scale_gen"] = gen
            self.applied["scale"] = scale
        gen = int(desired.get("resize_gen", 0))
        if gen > int(self.applied.get("resize_gen", 0)):
            for name, want in (desired.get("resize") or {}).items():
                self._manual_resize(name, want)
            self.applied["resize_gen"] = gen
        for window in desired.get("windows", []):
            if window not in [{"start": w["start"], "end": w["end"]} for w in self.windows]:
                self._append_window(window)
        for sp in desired.get("savepoints", []):
            if sp not in self.savepoints:
                self.savepoints[sp] = {"state": "requested"}
                self._event("SavepointRequested", f"savepoint {sp} requested")

    def _publish_scale(self) -> None:
        """Kubernetes: ``spec.desired.scale.data`` follows the master's own decisions (autoscaler,
        clamping), so ``kubectl scale`` and an HPA read the current target through the scale
        subresource. A person's request not yet applied is never overwritten."""
        if self.store.kind != "kubernetes":
            return
        want, applied = self.replicas["data"], dict(self.applied.get("scale") or {})
        if applied.get("data") == want:
            return

        def change(record: Any) -> dict[str, Any]:
            desired = dict(record.desired)
            scale = dict(desired.get("scale") or {})
            if scale.get("data") == applied.get("data"):
                desired["scale"] = {**scale, "data": want}
            return desired

        record = modify(self.store, self.name, change)
        if (record.desired.get("scale") or {}).get("data") == want:
            self.applied["scale"] = dict(record.desired["scale"])

    def _manual_scale(self, role: str, replicas: int) -> None:
        spec_role = self.job.spec.roles.get(role)
        if spec_role is None or role == "trainer":
            self._event("ScaleRefused", f"role {role!r} cannot be scaled horizontally")
            return
        lo, hi = spec_role.replicas.min, spec_role.replicas.top
        clamped = max(lo, min(hi, replicas))
        note = "" if clamped == replicas else f" (clamped to [{lo}, {hi}])"
        self._event(
            "ScaleRequested",
            f"{role}: {self.replicas.get(role)} -> {clamped} replicas{note}",
            data={"manual": True},
        )
        self.replicas[role] = clamped

    def _manual_resize(self, name: str, want: Mapping[str, Any]) -> None:
        ex = self.executors.get(name)
        if ex is None or ex.state != RUNNING:
            self._event("ResizeRefused", f"no running executor {name!r}")
            return
        a = ex.handle.allotment
        new = Allotment(float(want.get("cpu") or a.cpu), int(want.get("memory") or a.memory))
        if new != a:
            ex.handle = self.backend.resize(ex.handle, new)  # samples carry the allotment: a new regime
            self._event(
                "Resized",
                f"{name}: cpu {a.cpu:g} -> {new.cpu:g}, "
                f"memory {a.memory // 2**20} -> {new.memory // 2**20} MiB",
                name,
                {"manual": True, "cpu": new.cpu, "memory": new.memory},
            )

    def _append_window(self, window: Mapping[str, Any]) -> None:
        record = {"start": window["start"], "end": window["end"]}
        if self.dispatcher.finished():
            record.update(state="refused", reason="the job's data service has finished its pass")
            self._event("WindowRefused", f"window {window['start']}..{window['end']}: {record['reason']}")
        else:
            from airflow_provider_primus.spec.data import Window

            w = Window.model_validate(record)
            tasks, edges = self._plan(w.start, w.end)
            added = self.dispatcher.add_tasks(tasks, edges)
            record.update(
                state="appended",
                tasks=len(tasks),
                new_tasks=added,
                rows=sum(t.rows or 0 for t in tasks),
                task_ids=[t.task_id for t in tasks],
            )
            self._event(
                "WindowAppended",
                f"window {window['start']}..{window['end']}: {len(tasks)} tasks ({added} new)",
            )
        self.windows.append(record)

    def _open_savepoints(self) -> list[str]:
        return [sp for sp, s in self.savepoints.items() if s.get("state") == "requested"]

    def _send_savepoints(self) -> None:
        """Every open savepoint goes to every running trainer incarnation, and again every
        SAVEPOINT_RESEND_S until a checkpoint covers it: commands ride on report answers, which can
        be lost, and die with the trainer (or the master) that held them."""
        open_ = self._open_savepoints()
        trainers = self._running("trainer")
        keep = {ex.service_name for ex in trainers}
        self._savepoints_sent = {
            k: t for k, t in self._savepoints_sent.items() if k[0] in keep and k[1] in open_
        }
        now = time.monotonic()
        for ex in trainers:
            for sp in open_:
                sent = self._savepoints_sent.get((ex.service_name, sp))
                if sent is None or now - sent >= SAVEPOINT_RESEND_S:
                    self.server.send_command(ex.service_name, {"type": "savepoint", "id": sp})
                    self._savepoints_sent[(ex.service_name, sp)] = now

    def _trainer_reported(self, metrics: Mapping[str, Any]) -> None:
        """A trainer's report: its figures, and the savepoints its checkpoints covered (a cumulative
        list of groups, one per checkpoint, so a report the master missed costs nothing)."""
        if not metrics:
            return
        # The last one survives the trainer's end; the savepoint list is bookkeeping, not figures.
        self._trainer_report = {k: v for k, v in metrics.items() if k not in ("savepoints_done", "events")}
        for group in metrics.get("savepoints_done") or []:
            covered = [sp for sp in group["ids"] if self.savepoints.get(sp, {}).get("state") == "requested"]
            if covered:
                self._savepoints_done(covered, int(group["step"]), str(group["checkpoint"]))

    def _trainer_events(self, ex: Executor, metrics: Mapping[str, Any]) -> None:
        """Job events a trainer raised (stream outages, offset resets), each recorded once: reports
        repeat the newest ones with increasing ``seq``, and the last seq seen per incarnation is kept
        in ``applied`` so a restarted master does not record them again."""
        seen = self.applied.setdefault("trainer_events", {})
        last = int(seen.get(ex.service_name, 0))
        for event in metrics.get("events") or []:
            if int(event["seq"]) <= last:
                continue
            last = int(event["seq"])
            self._event(str(event["type"]), str(event["message"]), ex.name, dict(event.get("data") or {}))
        seen[ex.service_name] = last

    def _savepoints_done(self, ids: list[str], step: int, checkpoint: str) -> None:
        for sp in ids:
            self.savepoints[sp] = {"state": "done", "step": step, "checkpoint": checkpoint}
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        self._event(
            "SavepointDone",
            f"savepoint{'s' if len(ids) > 1 else ''} {shown} at step {step} ({checkpoint})",
            data={"ids": ids, "step": step, "checkpoint": checkpoint},
        )

    def _settle_savepoints(self, recheck: bool = False) -> None:
        """An ended job answers every open savepoint, so nothing waits on one forever. A trainer
        that finished took its final checkpoint after its last step: that checkpoint holds the state
        any later savepoint asks for. Otherwise no checkpoint will ever cover them. ``recheck``
        (closing): requests accepted since the last pass are answered too."""
        if recheck:
            with contextlib.suppress(JobNotFound):
                for sp in self.store.get(self.name).desired.get("savepoints", []):
                    if sp not in self.savepoints:
                        self.savepoints[sp] = {"state": "requested"}
                        self._event("SavepointRequested", f"savepoint {sp} requested")
        open_ = self._open_savepoints()
        self._savepoints_sent.clear()
        if not open_:
            return
        report = self._trainer_report
        final = report.get("checkpoint") if report.get("final") else None
        if self.phase == "Succeeded" and final:
            self._savepoints_done(open_, int(final["step"]), str(final["id"]))
            return
        reason = f"the job ended ({self.phase}) before a checkpoint covered it"
        for sp in open_:
            self.savepoints[sp] = {"state": "failed", "reason": reason}
        self._event("SavepointFailed", f"{len(open_)} savepoint(s): {reason}", data={"ids": open_})

    # --- observation ---------------------------------------------------------------------------------

    def _running(self, role: str | None = None) -> list[Executor]:
        return [
            e
            for e in self.executors.values()
            if e.state == RUNNING and (role is None or e.handle.role == role)
        ]

    def _observe(self) -> None:
        live = [e for e in self.executors.values() if e.state in (RUNNING, REMOVING)]
        observed = self.backend.observe([e.handle for e in live])
        service = self.dispatcher.executor_metrics()
        reports = self.server.take_reports()
        now = time.monotonic()
        for ex in live:
            obs = observed.get(ex.name)
            if obs is None:
                continue
            if ex.handle.role == "trainer":
                # Also when it has just exited: its last report (sent as it closed, before exiting)
                # holds its final figures and the savepoints its final checkpoint covered.
                _, metrics = reports.get(ex.service_name, (0.0, {}))
                self._trainer_reported(metrics)
                self._trainer_events(ex, metrics)
            if not obs.alive:
                self._on_exit(ex, obs)
                continue
            if ex.handle.role == "trainer":
                rows, wait, busy = (
                    metrics.get("rows", 0),
                    metrics.get("wait_s", 0.0),
                    metrics.get("busy_s", 0.0),
                )
                ex.reason = None
            else:
                metrics = service.get(ex.service_name) or {}
                rows = metrics.get("rows", 0)
                wait, busy = metrics.get("blocked_credit_s", 0.0), metrics.get("blocked_storage_s", 0.0)
            self.samples.append(
                Sample(
                    t=now,
                    executor=ex.name,
                    role=ex.handle.role,
                    cpu=ex.handle.allotment.cpu,
                    memory=ex.handle.allotment.memory,
                    cpu_s=obs.cpu_s,
                    rss=obs.rss,
                    read_bytes=obs.read_bytes,
                    write_bytes=obs.write_bytes,
                    rows=int(rows),
                    wait_s=float(wait),
                    busy_s=float(busy),
                )
            )

    def _exit_file(self, ex: Executor) -> Path:
        return self.paths.executors / f"{ex.service_name}.exit"

    def _on_exit(self, ex: Executor, obs: Observation) -> None:
        if obs.exit_code is None and obs.reason in (None, "exited"):
            # Adopted: not our child, but it wrote its code where we told it to.
            with contextlib.suppress(OSError, ValueError):
                obs = replace(obs, exit_code=int(self._exit_file(ex).read_text()))
        ex.exit_code, ex.reason = obs.exit_code, obs.reason
        self._forget_samples(ex.name)
        if ex.handle.role == "data":
            self.dispatcher.forget(ex.service_name)
        if ex.state == REMOVING:
            ex.state = REMOVED
            self._event("ExecutorRemoved", f"{ex.name} stopped", ex.name)
            return
        # "exited": it ended on its own (not ended by the backend, e.g. for memory). An adopted
        # process's exit code is unknown (it is not our child).
        ended = obs.reason in (None, "exited")
        if ended and obs.exit_code == 0 and ex.handle.role == "trainer":
            ex.state = COMPLETED
            self._event("TrainerCompleted", f"{ex.name} finished", ex.name)
            return
        if ended and obs.exit_code in (0, None) and ex.handle.role == "data" and self.dispatcher.finished():
            ex.state = COMPLETED
            return
        why = obs.reason if obs.reason not in (None, "exited") else f"exited with code {obs.exit_code}"
        role = self._role(ex.handle.role)
        if ex.restarts < role.failover.max_restarts:
            self._event("ExecutorFailed", f"{ex.name} failed ({why}); restarting", ex.name, {"reason": why})
            self._launch(ex.handle.role, ex.handle.index, ex.handle.allotment, previous=ex)
            return
        ex.state = FAILED
        remaining = len(self._running(ex.handle.role))
        if (
            role.failover.on_exhausted == "continue"
            and ex.handle.role == "data"
            and remaining >= role.replicas.min
        ):
            self.replicas["data"] = max(remaining, role.replicas.min)
            self._event(
                "ExecutorAbandoned",
                f"{ex.name} failed {ex.restarts + 1} times ({why}); continuing without it",
                ex.name,
            )
            return
        self._fail(f"{ex.name} failed {ex.restarts + 1} times; last: {why}")

    def _forget_samples(self, name: str) -> None:
        """Counters restart with a new incarnation: mixing them with the old ones would read as
        negative rates."""
        kept = [s for s in self.samples if s.executor != name]
        self.samples.clear()
        self.samples.extend(kept)

    def _role(self, name: str) -> Role:
        role = self.job.spec.roles.get(name)
        assert role is not None
        return role

    # --- decisions -----------------------------------------------------------------------------------

    def _autoscale(self) -> None:
        policy = self.job.spec.scaling
        if not policy.enabled:
            return
        roles = {}
        for name in ("data", "trainer"):
            role = self._role(name)
            res = role.resources
            roles[name] = RoleView(
                name=name,
                replicas=len(self._running(name)),
                min_replicas=role.replicas.min,
                max_replicas=role.replicas.top,
                cpu_range=res.cpu_range,
                memory_range=res.memory_range,
                initial_cpu=res.cpu,
                initial_memory=res.memory,
            )
        now = time.monotonic()
        # Judge nothing until the trainers consume: before that every data executor looks idle
        # (blocked on credit) and every trainer starved, which says nothing about their sizes.
        trainers = self._running("trainer")
        latest = {s.executor: s for s in self.samples}
        if not trainers or any(latest.get(t.name) is None or latest[t.name].rows <= 0 for t in trainers):
            self._warm_since = None
            return
        if self._warm_since is None:
            self._warm_since = now
        # An executor is judged from its first row on: start-up (imports, registration) is neither
        # saturation nor idleness.
        serving: dict[str, float] = {}
        for s in self.samples:
            if s.rows > 0 and s.executor not in serving:
                serving[s.executor] = s.t
        window = [
            s for s in self.samples if s.t >= max(self._warm_since, serving.get(s.executor, float("inf")))
        ]
        for d in decide(window, roles, policy, now, self.decisions):
            self.decisions.append(d)
            del self.decisions[:-50]
            self._event("ScaleDecision", d.reason, d.executor, d.to_dict())
            if d.action == "scale_out":
                self.replicas[d.role] = int(d.after)
            elif d.action == "scale_in":
                self.replicas[d.role] = int(d.after)
                victim = self.executors.get(d.executor or "")
                if victim is not None and victim.state == RUNNING:
                    self._remove(victim)
            else:
                ex = self.executors.get(d.executor or "")
                if ex is None or ex.state != RUNNING:
                    continue
                a = ex.handle.allotment
                new = (
                    Allotment(d.after, a.memory)
                    if d.action == "resize_cpu"
                    else Allotment(a.cpu, int(d.after))
                )
                ex.handle = self.backend.resize(ex.handle, new)

    def _converge(self) -> None:
        finished = self.dispatcher.finished()
        trainer_done = any(
            e.state == COMPLETED for e in self.executors.values() if e.handle.role == "trainer"
        )
        for role in ("data", "trainer"):
            want = self.replicas[role]
            if role == "data" and (finished or trainer_done or self._files_source() is None):
                want = len(self._running(role))  # no new data executors once the pass is over
            if role == "trainer" and trainer_done:
                want = 0
            running = self._running(role)
            spec_role = self._role(role)
            used = {
                e.handle.index
                for e in self.executors.values()
                if e.handle.role == role and e.state in (RUNNING, REMOVING)
            }
            free = (i for i in range(want + len(used) + 1) if i not in used)
            indexes = [next(free) for _ in range(want - len(running))]
            allotment = Allotment(spec_role.resources.cpu, spec_role.resources.memory)
            self._launch_all(role, indexes, allotment)
            if len(running) > want:
                for victim in sorted(running, key=lambda e: -e.handle.index)[: len(running) - want]:
                    self._remove(victim)

    def _launch_all(self, role: str, indexes: list[int], allotment: Allotment) -> None:
        """Launch executors; concurrently where the backend's launch is a network round trip (a pod
        create), so scaling out by hundreds takes seconds, not minutes."""
        if len(indexes) > 1 and self.backend.parallel_launch:
            with ThreadPoolExecutor(max_workers=LAUNCH_WORKERS) as pool:
                for future in [pool.submit(self._launch, role, i, allotment) for i in indexes]:
                    future.result()
            return
        for index in indexes:
            self._launch(role, index, allotment)

    def _launch(self, role: str, index: int, allotment: Allotment, previous: Executor | None = None) -> None:
        name = f"{role}-{index}"
        old = self.executors.get(name)
        ex = Executor(
            Handle(name, role, index, allotment),
            incarnation=(old.incarnation + 1) if old else 0,
            restarts=(previous.restarts + 1) if previous else 0,
        )
        command = self._command(role, ex.service_name)
        exit_file = self._exit_file(ex)
        exit_file.unlink(missing_ok=True)
        env = {TOKEN_ENV: self.token, EXIT_FILE_ENV: str(exit_file)}
        ex.handle = self.backend.launch(
            name, role, index, allotment, command, env, incarnation=ex.incarnation
        )
        self.executors[name] = ex
        self._event(
            "ExecutorLaunched",
            f"{name} (incarnation {ex.incarnation}): {allotment.cpu:g} CPU, {allotment.memory // 2**20} MiB",
            name,
            {**ex.handle.ref, "cpu": allotment.cpu, "memory": allotment.memory},
        )

    def _command(self, role: str, service_name: str) -> list[str]:
        spec = self.job.spec
        ds = spec.data_service
        if role == "data":
            command = [
                *_primus(),
                "serve-data",
                spec.data,
                "--dispatcher",
                self.server.location,
                "--name",
                service_name,
                "--window",
                str(ds.window),
                "--batch-rows",
                str(ds.batch_rows),
                "--master-grace-s",
                str(ds.master_grace_s),
                "--host",
                spec.control.host,
            ]
            if spec.passthrough:
                command += ["--passthrough", *spec.passthrough]
            return command
        command = [
            *_primus(),
            "train",
            spec.data,
            "--workdir",
            str(self.paths.workdir),
            "--json",
            "--dispatcher",
            self.server.location,
            "--executor-name",
            service_name,
            "--grace-s",
            str(ds.master_grace_s),
        ]
        if spec.training:
            command += ["--training", spec.training]
        if spec.follow:
            command += ["--follow", "--open-graph"]
        if spec.max_steps:
            command += ["--max-steps", str(spec.max_steps)]
        if spec.passthrough:
            command += ["--passthrough", *spec.passthrough, "--trace", str(self.paths.root / "trace.jsonl")]
        return command

    def _remove(self, ex: Executor) -> None:
        ex.state = REMOVING
        self._event("ExecutorStopping", f"stopping {ex.name}", ex.name)
        threading.Thread(target=self.backend.terminate, args=(ex.handle,), daemon=True).start()

    def _check_done(self) -> None:
        trainers = [e for e in self.executors.values() if e.handle.role == "trainer"]
        if trainers and all(e.state == COMPLETED for e in trainers):
            # Quarantined tasks' rows were not trained: the end must say so, not read as a full pass.
            quarantined = len(self.dispatcher.quarantine())
            if quarantined:
                tasks = f"{quarantined} task{'s' if quarantined != 1 else ''}"
                self.phase, self.message = "Succeeded", f"Succeeded with {tasks} quarantined"
                self._event(
                    "Succeeded",
                    f"job succeeded with {tasks} quarantined",
                    None,
                    {"tasks_quarantined": quarantined},
                )
            else:
                self.phase, self.message = "Succeeded", "the trainer finished"
                self._event("Succeeded", "job succeeded")

    def _report_quarantine(self) -> None:
        """One ``TaskQuarantined`` event per task as it is quarantined, with its source, file, the rows
        not trained ([start, end); end None when the task's length is unknown) and the error."""
        for task_id, info in self.dispatcher.quarantine().items():
            if task_id in self._quarantine_reported:
                continue
            self._quarantine_reported.add(task_id)
            start, end = info["rows"]
            rows = f"rows {start}..{end if end is not None else 'end'}"
            where = info.get("file") or ", ".join(info.get("files") or ()) or "no file"
            self._event(
                "TaskQuarantined",
                f"task {task_id} of source {info.get('source')} quarantined, {rows} of {where} not trained: "
                f"{info['error']}",
                None,
                info,
            )

    def _fail(self, message: str) -> None:
        self.phase, self.message = "Failed", message
        self._event("Failed", message)

    def _stop_all(self) -> None:
        live = [e for e in self.executors.values() if e.state in (RUNNING, REMOVING)]
        threads = []
        for ex in sorted(live, key=lambda e: e.handle.role != "trainer"):
            ex.state = REMOVED
            t = threading.Thread(target=self.backend.terminate, args=(ex.handle,), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=30)
        for ex in live:
            self.dispatcher.forget(ex.service_name)

    # --- status --------------------------------------------------------------------------------------

    def _progress(self) -> dict[str, Any]:
        d = self.dispatcher.status()
        metrics = self._trainer_report
        return {
            "tasks": d["tasks"],
            "tasks_done": d["done"],
            "tasks_quarantined": len(d["quarantined"]),
            # What was not trained and why, for people and operators: each quarantined task's source,
            # file, row range and error; and the rows left out for having no label.
            "quarantine": list(d["quarantine"].values()),
            "rows_without_label": sum(d["rows_without_label"].values()),
            "rows_without_label_by_task": d["rows_without_label"],
            "acked_rows": d["acked_rows"],
            "data_finished": d["finished"],
            "trainer_step": metrics.get("step"),
            "trainer_rows": metrics.get("rows"),
            "trainer_metrics": metrics.get("metrics"),
            "trainer_report": metrics,
        }

    def _latest_samples(self) -> dict[str, list[Sample]]:
        """Each executor's last two samples, in one pass (per executor it was O(samples) each)."""
        latest: dict[str, list[Sample]] = {}
        for s in self.samples:
            pair = latest.setdefault(s.executor, [])
            pair.append(s)
            if len(pair) > 2:
                del pair[0]
        return latest

    def _executor_view(self, ex: Executor, latest: list[Sample]) -> dict[str, Any]:
        view = ex.to_dict()
        if len(latest) == 2:
            a, b = latest
            dt = max(1e-6, b.t - a.t)
            view["telemetry"] = {
                "cpu_util": round((b.cpu_s - a.cpu_s) / dt / max(1e-6, b.cpu), 3),
                "rss": b.rss,
                "mem_util": round(b.rss / max(1, b.memory), 3),
                "rows_per_s": round((b.rows - a.rows) / dt, 1),
                "read_bytes": b.read_bytes,
                "write_bytes": b.write_bytes,
                "wait_s": round(b.wait_s, 3),
                "busy_s": round(b.busy_s, 3),
            }
        return view

    def _window_view(self, window: dict[str, Any]) -> dict[str, Any]:
        view = dict(window)
        if window.get("state") == "appended":
            ids = window.get("task_ids", [])
            view["tasks_done"] = self.dispatcher.tasks_done(ids)
            view["consumed"] = view["tasks_done"] == len(ids)
        return view

    def _roles_summary(self) -> str:
        """``data 3/3, trainer 1/1``: running of wanted, for ``kubectl get primusjobs``."""
        return ", ".join(
            f"{role} {len(self._running(role))}/{want}" for role, want in sorted(self.replicas.items())
        )

    def _write_status(self) -> None:
        proc = psutil.Process()
        recent = self._latest_samples()
        status = {
            "phase": self.phase,
            "message": self.message,
            "suspended": self.suspended,
            "master": {
                "pid": proc.pid,
                "pid_created": proc.create_time(),
                "api": self.api.url,
                "api_port": self.api.port,
                "dispatcher": self.server.location,
                "dispatcher_port": self.server.port,
            },
            "replicas": self.replicas,
            "selector": f"primus.dev/job={self.name},primus.dev/role=data",
            "roles": self._roles_summary(),
            "executors": {
                n: self._executor_view(e, recent.get(n, [])) for n, e in sorted(self.executors.items())
            },
            "progress": self._progress(),
            "windows": [self._window_view(w) for w in self.windows],
            "savepoints": self.savepoints,
            "decisions": [d.to_dict() for d in self.decisions],
            "applied": self.applied,
            "events": list(self._events_tail),
            "data_progress": self.dispatcher.progress(),
        }
        # An unchanged status is not written again until a heartbeat is due: on Kubernetes every
        # write is an etcd revision, and an idle job must not cost requests per pass.
        fingerprint, now = json.dumps(status, sort_keys=True, default=str), time.monotonic()
        if fingerprint == self._last_write[0] and now - self._last_write[1] < STATUS_HEARTBEAT_S:
            return
        status["updated"] = time.time()
        modify(self.store, self.name, lambda _r: status, part="status")
        self._last_write = (fingerprint, now)
        if self.on_status is not None:
            self.on_status(status)

    def close(self) -> None:
        if self.phase in TERMINAL:
            self._stop_all()
        try:
            if self.phase in TERMINAL:
                self._settle_savepoints(recheck=True)
            self._write_status()
        except Exception:
            log.exception("final status write")
        self.api.stop()
        self.server.stop()
        self.backend.close()
        self.store.close()  # this thread's connection, or the informer's watch threads
