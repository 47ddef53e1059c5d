"""The YARN backend: executors are containers of the job's YARN application, resized in place.

It implements the executor contract of ``resources/backend.py`` on the ApplicationMaster's API
(``am.py``), so the master, dispatcher and autoscaler are the same as on a laptop or on Kubernetes.
What is specific here:

* **Identity.** An executor incarnation is the AM's key ``<name>.<incarnation>``: a launch the master
  repeats (it died after asking, before recording) finds the same ask or container instead of a
  duplicate. The handle records the container id once YARN allocated one.
* **Asking is not running.** ``launch`` places the ask and returns (``launch_wait_s``, 0 by default,
  may wait that long for the container to start): an ask YARN cannot place yet stays pending, like
  an unschedulable pod, and counts as alive; the handle gets its container id when ``observe``
  sees it allocated. Not waiting matters: the master launches the data role and then the trainers,
  and a launch that waited for its container would put the trainers' asks a scheduling round
  (an AM heartbeat, a container start) behind the data executors' (``primus bench yarn``).
* **Secrets.** The token, the job's documents and a TLS job's CA are LocalResources (staged 0600 on
  the cluster's filesystem); the executor reads the token from the file ``$PRIMUS_JOB_TOKEN_FILE``
  names and the CA from the folder ``$PRIMUS_TLS_DIR`` names: its container's directory, never the
  master's folder (which is on another machine).
* **Vertical scaling in place.** ``resize`` sends a container update request (increase, decrease, or
  increase then decrease when one dimension goes each way); the NodeManager changes the running
  container's resources, its id stays. A refusal is a ``ResizeRefused`` event and
  ``on_resize_refused`` decides, as on Kubernetes: ``keep`` or ``recreate``.
* **Restarts.** When the ApplicationMaster dies YARN starts a new attempt that keeps the containers;
  the next call finds it, and ``observe`` re-adopts every executor whose container the new attempt
  lists, then releases the containers nobody claims. A restarted master adopts the same way.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.credentials import TOKEN_ENV, TOKEN_FILE_ENV
from airflow_provider_primus.hadoop.kerberos import HDFS_TOKEN_FILE_ENV
from airflow_provider_primus.process import EXIT_FILE_ENV
from airflow_provider_primus.resources.allotment import thread_env
from airflow_provider_primus.resources.backend import Allotment, Handle, LaunchRequest, Observation
from airflow_provider_primus.tls import ADVERTISE_ENV, TLS_DIR_ENV
from airflow_provider_primus.yarn.am import AmClient, AmError, AmUnreachable
from airflow_provider_primus.yarn.application import (
    FORWARDED_ENV,
    HDFS_TOKEN_LINK,
    TOKEN_LINK,
    YarnSession,
    document_link,
)

log = logging.getLogger(__name__)

__all__ = ["YarnBackend", "memory_mb", "vcores"]

T = TypeVar("T")
AM_RESTARTED = "ApplicationMasterRestarted"  # a backend's own event type, recorded as it comes
LIVE = ("requested", "allocated", "running", "releasing")
# The master's environment that an executor container inherits (the rest of a NodeManager's
# environment is the cluster's): where the package and the job's files are.
# YARN's own exit statuses (ContainerExitStatus): negative, not a process's code.
EXIT_STATUS = {
    -100: "released or its node was lost",
    -101: "the node's disks failed",
    -102: "preempted",
    -103: "killed for exceeding virtual memory",
    -104: "killed for exceeding physical memory",
    -105: "killed by the ApplicationMaster",
    -106: "killed by the ResourceManager",
    -107: "killed after the application finished",
    -108: "killed by the container scheduler",
    -109: "killed for excess logs",
}


def memory_mb(allotment: Allotment) -> int:
    return max(1, math.ceil(allotment.memory / 2**20))


def vcores(allotment: Allotment) -> int:
    """YARN counts whole vcores: a fractional allotment asks for the next one up."""
    return max(1, math.ceil(allotment.cpu - 1e-9))


class YarnBackend:
    parallel_launch = True  # a launch is one call to the AM; the master may issue many at once

    def __init__(
        self,
        session: YarnSession,
        *,
        on_event: Callable[[str, str, dict[str, Any]], None] | None = None,
        on_resize_refused: Literal["keep", "recreate"] = "keep",
        python: str | None = None,
        launch_wait_s: float = 0.0,
        resize_wait_s: float = 30.0,
        job_phase: Callable[[], str | None] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.session = session
        self.on_event = on_event
        self.on_resize_refused = on_resize_refused
        self.python = python
        self.launch_wait_s, self.resize_wait_s = launch_wait_s, resize_wait_s
        self.job_phase = job_phase
        self.env = dict(env or {})  # for every container (HADOOP_CONF_DIR when the job names one)
        self._lock = threading.Lock()
        self._am: AmClient | None = None
        self.attempt: str | None = None
        self.attempts_seen = 0
        self._terminated: dict[str, str] = {}  # key -> why we ended it

    # --- the ApplicationMaster ------------------------------------------------------------------------

    def _connect(self, stale: AmClient | None) -> AmClient:
        with self._lock:
            if self._am is not None and self._am is not stale:
                return self._am  # another thread reconnected meanwhile
            previous = self.attempt
            if stale is not None:
                stale.close()
            # The attempt the ResourceManager lists as newest, once its AM answers: the same one
            # after a transient error, the next one after the AM died.
            self._am, self.attempt = self.session.wait_am()
            self.attempts_seen += 1
            if previous is not None and self.attempt != previous:
                self._emit(
                    AM_RESTARTED,
                    "",
                    {"reason": f"ApplicationMaster attempt {self.attempt} replaced {previous}; "
                     "re-adopting its containers"},
                )  # fmt: skip
            return self._am

    def _call(self, fn: Callable[[AmClient], T]) -> T:
        am = self._am or self._connect(None)
        try:
            return fn(am)
        except AmUnreachable:
            log.warning("the ApplicationMaster at %s does not answer; waiting for the next attempt", am.url)
            return fn(self._connect(am))

    # --- launching ----------------------------------------------------------------------------------

    def _command(self, command: Sequence[str]) -> list[str]:
        out = list(command)
        if out and out[0] == sys.executable and self.python:
            out[0] = self.python
        links = {path: document_link(i, path) for i, path in enumerate(self.session.documents)}
        return [links.get(arg, arg) for arg in out]  # documents are in the container's directory

    def _env(self, env: Mapping[str, str], allotment: Allotment) -> dict[str, str]:
        out = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        # YARN counts vcores but (without the LinuxContainerExecutor's cgroups) does not hold a
        # process to them: native pools sized to the node's cores would oversubscribe it.
        out.update(thread_env(allotment))
        out.update(self.env)
        out.update({k: v for k, v in env.items() if k not in (TOKEN_ENV, EXIT_FILE_ENV)})
        out[TOKEN_FILE_ENV] = "{{PWD}}/" + TOKEN_LINK  # expanded by the NodeManager
        if self.session.wheel_links:  # the user's wheels, localized beside it, ahead on the path
            wheels = ["{{PWD}}/" + link for link in self.session.wheel_links]
            forwarded = [out["PYTHONPATH"]] if out.get("PYTHONPATH") else []
            out["PYTHONPATH"] = "<CPS>".join([*wheels, *forwarded])  # <CPS>: the node's separator
        # The node's address, as a pod's IP is in a pod: a server bound to the loopback default
        # binds it, one bound to a wildcard advertises it, so peers on other nodes can dial it.
        out[ADVERTISE_ENV] = "{{NM_HOST}}"
        if TLS_DIR_ENV in env:
            out[TLS_DIR_ENV] = "{{PWD}}"  # ca.crt and ca.key are localized there (application.py)
        if self.session.conf.kerberos:  # hdfs:// with the application's token, not a keytab
            out[HDFS_TOKEN_FILE_ENV] = "{{PWD}}/" + HDFS_TOKEN_LINK
        return out

    def launch(self, request: LaunchRequest) -> Handle:
        key = f"{request.name}.{request.incarnation}"
        allotment = request.allotment
        spec = {
            "name": request.name,
            "role": request.role,
            "memory_mb": memory_mb(allotment),
            "vcores": vcores(allotment),
            "command": self._command(request.command),
            "env": self._env(request.env, allotment),
            "resources": [f.am_resource() for f in self.session.files],
        }
        slot = self._call(lambda am: am.launch(key, spec, self.launch_wait_s))
        return Handle(request.name, request.role, request.index, allotment, self._ref(key, slot))

    def _ref(self, key: str, slot: Mapping[str, Any]) -> dict[str, Any]:
        ref: dict[str, Any] = {"key": key, "application": self.session.app_id}
        for field in ("container", "node", "node_http"):
            if slot.get(field):
                ref[field] = slot[field]
        return ref

    # --- changing -------------------------------------------------------------------------------------

    def resize(self, handle: Handle, allotment: Allotment) -> Handle:
        key = handle.ref["key"]
        mb, cores = memory_mb(allotment), vcores(allotment)
        try:
            slot = self._call(lambda am: am.resize(key, mb, cores, self.resize_wait_s))
            resize = slot.get("resize") or {}
            state, error = resize.get("state"), resize.get("error")
        except AmError as exc:
            state, error = "refused", str(exc)
        if state == "applied":
            return Handle(handle.name, handle.role, handle.index, allotment, dict(handle.ref))
        why = error or f"the update is still {state} after {self.resize_wait_s:g}s"
        self._emit(
            EventType.RESIZE_REFUSED,
            handle.name,
            {
                "reason": f"{handle.name}: YARN refused the in-place resize ({why}); "
                + (
                    "keeping the current allotment"
                    if self.on_resize_refused == "keep"
                    else "recreating the container"
                ),
                "cpu": allotment.cpu,
                "memory": allotment.memory,
            },
        )
        if self.on_resize_refused == "keep":
            return handle
        self._release(key, "resize refused: recreated with the new allotment")
        return Handle(handle.name, handle.role, handle.index, allotment, dict(handle.ref))

    def terminate(self, handle: Handle, grace_s: float = 10.0) -> None:
        """Release the container: the NodeManager sends SIGTERM, then SIGKILL after its own delay
        (``yarn.nodemanager.sleep-delay-before-sigkill.ms``), so ``grace_s`` is the cluster's."""
        self._release(handle.ref["key"], "terminated")

    def _release(self, key: str, why: str) -> None:
        with self._lock:
            self._terminated[key] = why
        try:
            self._call(lambda am: am.release(key))
        except AmError as exc:
            if exc.status != 404:
                raise

    # --- observing ------------------------------------------------------------------------------------

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        now = time.monotonic()
        status = self._call(lambda am: am.status())
        slots = {s["key"]: s for s in status.get("executors") or []}
        unclaimed = set(status.get("unclaimed") or [])
        out: dict[str, Observation] = {}
        for h in handles:
            key = h.ref.get("key", "")
            slot = slots.get(key)
            if slot is None and h.ref.get("container") in unclaimed:
                slot = self._adopt(h)  # a new attempt: its predecessor launched this one
                unclaimed.discard(h.ref["container"])
            out[h.name] = self._observation(h, slot, now)
        if unclaimed:
            released = self._call(lambda am: am.release_unclaimed())
            for container in released:
                self._emit(
                    EventType.ORPHAN_DELETED,
                    "",
                    {"reason": f"releasing container {container}: no executor of this job claims it"},
                )
        return out

    def _observation(self, h: Handle, slot: Mapping[str, Any] | None, now: float) -> Observation:
        with self._lock:
            ours = self._terminated.get(h.ref.get("key", ""))
        if slot is None:
            return Observation(
                h.name,
                now,
                False,
                reason=ours or "container lost (the ApplicationMaster has no record of it)",
            )
        if slot.get("container") and h.ref.get("container") != slot["container"]:
            h.ref.update(self._ref(h.ref["key"], slot))  # allocated since launch returned
        state = slot.get("state")
        if state in LIVE:
            return Observation(h.name, now, True)
        if state == "released":
            return Observation(h.name, now, False, reason=ours or "terminated")
        if state == "failed":
            return Observation(
                h.name, now, False, reason=ours or f"container failed: {slot.get('diagnostics')}"
            )
        code = slot.get("exit_status")
        if code is not None and code >= 0:
            return Observation(h.name, now, False, exit_code=int(code), reason=ours or "exited")
        what = EXIT_STATUS.get(code, f"exit status {code}") if code is not None else "unknown"
        reason = f"memory limit: {what}" if code in (-103, -104) else f"container lost: {what}"
        diagnostics = (slot.get("diagnostics") or "").strip().splitlines()
        if diagnostics:
            reason += f" ({diagnostics[0][:200]})"
        return Observation(h.name, now, False, reason=ours or reason)

    def _adopt(self, handle: Handle) -> dict[str, Any] | None:
        key, container = handle.ref.get("key", ""), handle.ref.get("container")
        if not container:
            return None
        try:
            slot = self._call(lambda am: am.adopt(key, container, handle.name, handle.role))
        except AmError as exc:
            if exc.status in (404, 410):
                log.info("could not adopt %s (%s): %s", handle.name, container, exc)
                return None
            raise
        self._emit(
            EventType.EXECUTOR_ADOPTED, handle.name, {"reason": f"re-adopted {handle.name} ({container})"}
        )
        return slot

    def adopt(self, handle: Handle) -> bool:
        """A restarted master's executor: the AM knows it (same attempt) or adopts its container."""
        key = handle.ref.get("key")
        if not key:
            return False
        slot: dict[str, Any] | None
        try:
            slot = self._call(lambda am: am.executor(key))
        except AmError as exc:
            if exc.status != 404:
                raise
            slot = self._adopt(handle)
        return slot is not None and slot.get("state") in LIVE

    def containers(self) -> list[dict[str, Any]]:
        """What the ApplicationMaster tracks (the UI and the tests show container ids and sizes)."""
        return list(self._call(lambda am: am.status()).get("executors") or [])

    def _emit(self, type_: str, executor: str, data: dict[str, Any]) -> None:
        log.warning("%s %s: %s", type_, executor, data.get("reason"))
        if self.on_event is not None:
            self.on_event(type_, executor, data)

    def close(self) -> None:
        """End the application when the job ended; otherwise leave it (and its containers) running
        for the next master, which finds it by its tag."""
        phase = self.job_phase() if self.job_phase else None
        if phase in ("Succeeded", "Failed", "Stopped") and self._am is not None:
            status = {"Succeeded": "SUCCEEDED", "Failed": "FAILED", "Stopped": "KILLED"}[phase]
            try:
                self._am.finish(status, f"Primus job {self.session.job} {phase.lower()}")
            except (AmError, AmUnreachable) as exc:
                log.warning("could not finish the YARN application: %s", exc)
            self.session.remove_staged()  # the token and documents are not left on the cluster
        if self._am is not None:
            self._am.close()
        self.session.close()
