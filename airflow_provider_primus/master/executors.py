"""Executor lifecycle: launch, adopt, lose, restart, remove.

An executor is a role's replica at an index; each launch of it is a new incarnation with its own
name towards the dispatcher, so a restarted executor never inherits the leases of the one that died.
What happens when one ends (completed, restarted per the failover policy, abandoned, or the job
fails) is decided here and reported as an ``Exit`` the reconcile loop acts on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.job import PrimusJob, Role
from airflow_provider_primus.contracts.status import EventType, ExecutorState
from airflow_provider_primus.credentials import TOKEN_ENV
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.process import EXIT_FILE_ENV, EXIT_TERMINAL, error_file, read_error
from airflow_provider_primus.resources.backend import Allotment, Backend, Handle, LaunchRequest, Observation
from airflow_provider_primus.tls import TLS_DIR_ENV

log = logging.getLogger(__name__)

__all__ = ["COMPLETED", "FAILED", "REMOVED", "REMOVING", "RUNNING", "Executor", "Executors", "Exit"]

RUNNING, REMOVING, COMPLETED, FAILED, REMOVED = (
    ExecutorState.RUNNING,
    ExecutorState.REMOVING,
    ExecutorState.COMPLETED,
    ExecutorState.FAILED,
    ExecutorState.REMOVED,
)
LAUNCH_WORKERS = 16  # concurrent launches for a backend that allows them (pod creates)

# (role, name towards the dispatcher, index) -> the executor's ``primus`` arguments
CommandFor = Callable[[str, str, int], list[str]]


@dataclass
class Executor:
    handle: Handle
    incarnation: int = 0
    restarts: int = 0
    state: ExecutorState = RUNNING
    exit_code: int | None = None
    reason: str | None = None
    error: str | None = None  # the exception it last ended on, one line (errors.one_line)

    @property
    def name(self) -> str:
        return self.handle.name

    @property
    def role(self) -> str:
        return self.handle.role

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
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Executor:
        return cls(
            Handle.from_dict(d["handle"]),
            int(d["incarnation"]),
            int(d["restarts"]),
            ExecutorState(d["state"]),
            d.get("exit_code"),
            d.get("reason"),
            d.get("error"),
        )


@dataclass(frozen=True)
class Exit:
    """What an executor's end means for the job: ``failed`` carries the job's failure message,
    ``abandoned`` the replicas the role continues with."""

    kind: str  # removed | completed | restarted | abandoned | failed
    message: str = ""
    replicas: int = 0


class Executors:
    def __init__(
        self,
        job: PrimusJob,
        backend: Backend,
        events: EventLog,
        *,
        token: str,
        exit_dir: Path,
        command_for: CommandFor,
        known: Mapping[str, Mapping[str, Any]],
        tls_dir: Path | None = None,
    ) -> None:
        """``tls_dir``: the job's CA folder when it serves TLS (executors find it through
        ``$PRIMUS_TLS_DIR``; the Kubernetes backend mounts the job's TLS Secret there instead)."""
        self.tls_dir = tls_dir
        self.job, self.backend, self.events = job, backend, events
        self.token, self.exit_dir, self.command_for = token, exit_dir, command_for
        self.all: dict[str, Executor] = {n: Executor.from_dict(d) for n, d in known.items()}
        self._stops: dict[str, threading.Thread] = {}  # name -> its backend stop still running

    def running(self, role: str | None = None) -> list[Executor]:
        return [e for e in self.all.values() if e.state == RUNNING and (role is None or e.role == role)]

    def live(self) -> list[Executor]:
        """Running or being stopped: what the backend still observes."""
        return [e for e in self.all.values() if e.state in (RUNNING, REMOVING)]

    def role(self, name: str) -> Role:
        role = self.job.spec.roles.get(name)
        assert role is not None
        return role

    def exit_file(self, ex: Executor) -> Path:
        return self.exit_dir / f"{ex.service_name}.exit"

    def last_error(self, ex: Executor) -> str | None:
        """The exception ``ex`` ended on, as it left it beside its exit code (a local or re-adopted
        process), else as its last report said (a trainer in a pod, which has no file here)."""
        return read_error(self.exit_file(ex)) or ex.error

    def why(self, ex: Executor, obs: Observation) -> tuple[str, str]:
        """Why ``ex`` ended: the backend's reason or the exit code, and that with the error it ended
        on, for a message ("exited with code 1: OSError: [Errno 28] No space left on device")."""
        why = obs.reason if obs.reason not in (None, "exited") else f"exited with code {obs.exit_code}"
        ex.error = self.last_error(ex)
        return why, f"{why}: {ex.error}" if ex.error else why

    @staticmethod
    def terminal(obs: Observation) -> bool:
        """It ended on an error no restart can fix (``EXIT_TERMINAL``): the job fails at once."""
        return obs.reason in (None, "exited") and obs.exit_code == EXIT_TERMINAL

    def adopt_all(self) -> list[Executor]:
        """Re-adopt what a previous master launched; returns the ones that ended meanwhile."""
        lost = []
        for ex in self.live():
            if self.backend.adopt(ex.handle):
                where = ex.handle.ref.get("pod") or f"pid {ex.handle.ref.get('pid')}"
                self.events.emit(EventType.EXECUTOR_ADOPTED, f"re-adopted {ex.name} ({where})", ex.name)
                if ex.state == REMOVING:  # the previous master's stop request died with it
                    threading.Thread(target=self._terminate, args=(ex.handle,), daemon=True).start()
            else:
                self.events.emit(
                    EventType.EXECUTOR_LOST, f"{ex.name} ended while the master was away", ex.name
                )
                lost.append(ex)
        return lost

    def launch_all(self, role: str, indexes: list[int], allotment: Allotment) -> None:
        """Launch executors; concurrently where the backend's launch is a network round trip (a pod
        create), so scaling out by hundreds takes seconds, not minutes."""
        if len(indexes) > 1 and self.backend.parallel_launch:
            with ThreadPoolExecutor(max_workers=LAUNCH_WORKERS) as pool:
                for future in [pool.submit(self.launch, role, i, allotment) for i in indexes]:
                    future.result()
            return
        for index in indexes:
            self.launch(role, index, allotment)

    def launch(
        self,
        role: str,
        index: int,
        allotment: Allotment,
        previous: Executor | None = None,
        *,
        restarts: int | None = None,
    ) -> None:
        """``previous``: the incarnation this one restarts (its restarts + 1); ``restarts``: the
        count to carry otherwise (a trainer group restarted as a whole)."""
        name = f"{role}-{index}"
        old = self.all.get(name)
        ex = Executor(
            Handle(name, role, index, allotment),
            incarnation=(old.incarnation + 1) if old else 0,
            restarts=(previous.restarts + 1) if previous else (restarts or 0),
        )
        exit_file = self.exit_file(ex)
        exit_file.unlink(missing_ok=True)
        error_file(exit_file).unlink(missing_ok=True)
        env = {TOKEN_ENV: self.token, EXIT_FILE_ENV: str(exit_file)}
        if self.tls_dir is not None:
            env[TLS_DIR_ENV] = str(self.tls_dir)
        command = self.command_for(role, ex.service_name, index)
        ex.handle = self.backend.launch(
            LaunchRequest(name, role, index, allotment, command, env, incarnation=ex.incarnation)
        )
        self.all[name] = ex
        self.events.emit(
            EventType.EXECUTOR_LAUNCHED,
            f"{name} (incarnation {ex.incarnation}): {allotment.cpu:g} CPU, {allotment.memory // 2**20} MiB",
            name,
            {**ex.handle.ref, "cpu": allotment.cpu, "memory": allotment.memory},
        )

    def resize(self, ex: Executor, allotment: Allotment) -> None:
        ex.handle = self.backend.resize(ex.handle, allotment)

    def remove(self, ex: Executor) -> None:
        ex.state = REMOVING
        self.events.emit(EventType.EXECUTOR_STOPPING, f"stopping {ex.name}", ex.name)
        stop = threading.Thread(target=self._terminate, args=(ex.handle,), daemon=True)
        stop.start()
        self._stops[ex.name] = stop

    def still_stopping(self, name: str) -> bool:
        """A stop of ``name`` is still under way: the process may be gone while the backend still
        cleans up after it (a local cgroup of the same name), so the name is not launched again yet."""
        stop = self._stops.get(name)
        if stop is not None and not stop.is_alive():
            del self._stops[name]
            return False
        return stop is not None

    def kill(self, ex: Executor) -> None:
        """End a hung executor now, with no grace (SIGKILL; a pod deleted at once): it is not
        serving, and a stopped process would only act on a polite stop once woken. Waited for, so
        its replacement is launched under the same name only once it is gone."""
        self._terminate(ex.handle, grace_s=0.0)

    def _terminate(self, handle: Handle, grace_s: float | None = None) -> None:
        """A stop on its own thread: a failure is logged there (the executor may still run, and
        says so to the next observation), not lost as an unhandled thread exception."""
        try:
            if grace_s is None:
                self.backend.terminate(handle)
            else:
                self.backend.terminate(handle, grace_s=grace_s)
        except Exception:
            log.exception("stopping %s", handle.name)

    def stop_all(self) -> list[Executor]:
        """Stop every live executor (trainers first) and wait for them; returns them."""
        live = self.live()
        threads = []
        for ex in sorted(live, key=lambda e: e.role != "trainer"):
            ex.state = REMOVED
            t = threading.Thread(target=self._terminate, args=(ex.handle,), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=30)
        return live

    def terminate_adopted(self) -> None:
        """A master that cannot run the job stops what its predecessor left running."""
        for ex in self.live():
            with contextlib.suppress(Exception):
                if self.backend.adopt(ex.handle):
                    self.backend.terminate(ex.handle)
            ex.state = REMOVED

    def lost_while_away(self, ex: Executor) -> Observation:
        return Observation(ex.name, time.monotonic(), False, reason="ended while no master ran")

    def observed(self, ex: Executor, obs: Observation) -> Observation:
        """``obs`` with the exit code an adopted executor (not our child) wrote where we told it to."""
        if obs.exit_code is None and obs.reason in (None, "exited"):
            with contextlib.suppress(OSError, ValueError):
                return replace(obs, exit_code=int(self.exit_file(ex).read_text()))
        return obs

    def exited(self, ex: Executor, obs: Observation, *, data_finished: bool) -> Exit:
        """Settle an executor that ended: removed, completed, restarted, abandoned or the job fails."""
        obs = self.observed(ex, obs)
        ex.exit_code, ex.reason = obs.exit_code, obs.reason
        if ex.state == REMOVING:
            ex.state = REMOVED
            self.events.emit(EventType.EXECUTOR_REMOVED, f"{ex.name} stopped", ex.name)
            return Exit("removed")
        # "exited": it ended on its own (not ended by the backend, e.g. for memory). An adopted
        # process's exit code is unknown (it is not our child).
        ended = obs.reason in (None, "exited")
        if ended and obs.exit_code == 0 and ex.role == "trainer":
            ex.state = COMPLETED
            self.events.emit(EventType.TRAINER_COMPLETED, f"{ex.name} finished", ex.name)
            return Exit("completed")
        if ended and obs.exit_code in (0, None) and ex.role == "data" and data_finished:
            ex.state = COMPLETED
            return Exit("completed")
        reason, why = self.why(ex, obs)
        role = self.role(ex.role)
        if self.terminal(obs):
            ex.state = FAILED
            self.events.emit(
                EventType.EXECUTOR_FAILED,
                f"{ex.name} failed ({why}); not restarted: retrying cannot fix this",
                ex.name,
                {"reason": reason, "error": ex.error, "terminal": True},
            )
            return Exit("failed", f"{ex.name} failed, not retried (no retry can fix it): {ex.error or why}")
        if ex.restarts < role.failover.max_restarts:
            self.events.emit(
                EventType.EXECUTOR_FAILED,
                f"{ex.name} failed ({why}); restarting",
                ex.name,
                {"reason": reason, "error": ex.error},
            )
            self.launch(ex.role, ex.handle.index, ex.handle.allotment, previous=ex)
            return Exit("restarted")
        ex.state = FAILED
        remaining = len(self.running(ex.role))
        if role.failover.on_exhausted == "continue" and ex.role == "data" and remaining >= role.replicas.min:
            self.events.emit(
                EventType.EXECUTOR_ABANDONED,
                f"{ex.name} failed {ex.restarts + 1} times ({why}); continuing without it",
                ex.name,
            )
            return Exit("abandoned", replicas=max(remaining, role.replicas.min))
        return Exit("failed", f"{ex.name} failed {ex.restarts + 1} times; last: {why}")
