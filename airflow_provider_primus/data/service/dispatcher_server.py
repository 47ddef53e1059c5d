"""The dispatcher as a service: a Flight server whose actions are the dispatcher's methods.

The master hosts it for a job; a standalone trainer, tests and benchmarks host it in-process.
Binds 127.0.0.1 unless told otherwise; every call needs the job token; with the job's CA it serves
TLS (``auth.server_args``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pyarrow import flight

from airflow_provider_primus.data.service.auth import advertised, call_options, flight_client, server_args
from airflow_provider_primus.data.service.dispatcher import Dispatcher, JobFailed, Lease
from airflow_provider_primus.data.service.wire import dumps, loads, task_from_dict, task_to_dict
from airflow_provider_primus.tls import JobCa

log = logging.getLogger(__name__)

# A file that holds the dispatcher's current location. In a pod it is a downward API file of the
# pod's ``primus.dev/dispatcher`` annotation, which a restarted master (a new pod, a new IP) rewrites:
# the executors it adopts find it there, no DNS or Service needed.
LOCATION_FILE_ENV = "PRIMUS_DISPATCHER_FILE"


def location_file(environ: dict[str, str] | None = None) -> Callable[[], str | None] | None:
    """The reader of ``$PRIMUS_DISPATCHER_FILE``, or None when the variable is unset."""
    name = (environ if environ is not None else os.environ).get(LOCATION_FILE_ENV)
    if not name:
        return None
    path = Path(name)

    def read() -> str | None:
        try:
            return path.read_text().strip() or None
        except OSError:
            return None

    return read


class DispatcherServer(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(
        self,
        dispatcher: Dispatcher,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        ca: JobCa | None = None,
    ) -> None:
        super().__init__(**server_args(host, port, token, ca))
        self.dispatcher = dispatcher
        self.location = advertised(host, self.port, tls=ca is not None)
        self._thread: threading.Thread | None = None
        # Executors that lease nothing (trainers) report their telemetry here and pick up commands
        # from the master (e.g. a savepoint) in the answer.
        self._reports_lock = threading.Lock()
        self.reports: dict[str, tuple[float, dict[str, Any]]] = {}
        self.commands: dict[str, list[dict[str, Any]]] = {}
        # Data-parallel trainers' rendezvous: the group's leader publishes where its TCPStore
        # listens for its generation (one per start of the group); the others look it up.
        self.rendezvous: dict[int, str] = {}

    def send_command(self, executor: str, command: dict[str, Any]) -> None:
        with self._reports_lock:
            self.commands.setdefault(executor, []).append(command)

    def take_reports(self) -> dict[str, tuple[float, dict[str, Any]]]:
        with self._reports_lock:
            return dict(self.reports)

    def start(self) -> DispatcherServer:
        self._thread = threading.Thread(target=self.serve, name="primus-dispatcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [
            (name, "")
            for name in (
                "register",
                "heartbeat",
                "lease",
                "release",
                "fail",
                "ack",
                "finished",
                "status",
                "report",
                "rewind",
                "claim",
                "rendezvous",
            )
        ]

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = loads(action.body.to_pybytes()) or {}
        d = self.dispatcher
        kind = action.type
        if kind == "register":
            result: Any = d.register(body["executor"], body["location"])
        elif kind == "heartbeat":
            result = d.heartbeat(body["executor"], body.get("metrics"))
        elif kind == "lease":
            try:
                lease = d.lease(body["executor"])
            except JobFailed as exc:
                result = {"failed": str(exc)}
            else:
                result = {"finished": d.finished()} if lease is None else _lease_to_dict(lease)
        elif kind == "release":
            unlabelled = [(int(a), int(b)) for a, b in body.get("unlabelled") or ()]
            d.release(body["executor"], body["item_id"], body.get("total_rows"), unlabelled)
            result = True
        elif kind == "fail":
            d.fail(body["executor"], body["item_id"], body["error"], file=body.get("file"))
            result = True
        elif kind == "ack":
            for task_id, ranges in body["acks"].items():
                d.ack(task_id, [tuple(r) for r in ranges])
            result = True
        elif kind == "finished":  # O(1): the loader asks this whenever it runs out of batches
            result = {"finished": d.finished(), "failed": d.failed(), "idle": d.idle()}
        elif kind == "status":
            result = d.status()
        elif kind == "rewind":
            progress = {t: [tuple(r) for r in ranges] for t, ranges in body["progress"].items()}
            self.dispatcher = d.rewound(progress)
            result = True
        elif kind == "claim":
            result = {t: d.claim(t, [tuple(r) for r in rs]) for t, rs in body["claims"].items()}
        elif kind == "rendezvous":
            gen = int(body["generation"])
            with self._reports_lock:
                if body.get("address"):
                    self.rendezvous = {g: a for g, a in self.rendezvous.items() if g > gen - 2}
                    self.rendezvous[gen] = str(body["address"])
                result = {"address": self.rendezvous.get(gen), "newest": max(self.rendezvous, default=None)}
        elif kind == "report":
            with self._reports_lock:
                if d.is_fenced(body["executor"]):  # a replaced trainer: its figures and commands are gone
                    result = {"commands": [], "fenced": True}
                else:
                    self.reports[body["executor"]] = (time.monotonic(), dict(body.get("metrics") or {}))
                    result = {"commands": self.commands.pop(body["executor"], [])}
        else:
            raise flight.FlightServerError(f"unknown action {kind!r}")
        yield dumps(result)


def _lease_to_dict(lease: Lease) -> dict[str, Any]:
    return {
        "item_id": lease.item_id,
        "task": task_to_dict(lease.task),
        "start_row": lease.start_row,
        "end_row": lease.end_row,
        "epoch": lease.epoch,
    }


class DispatcherClient:
    """The executor's and the loader's side of the dispatcher service."""

    def __init__(
        self,
        location: str,
        token: str,
        timeout_s: float = 30.0,
        grace_s: float = 0.0,
        *,
        ca: JobCa | None = None,
        locate: Callable[[], str | None] | None = None,
    ) -> None:
        """``ca``: the job's CA for a ``grpc+tls://`` location (default: ``$PRIMUS_TLS_DIR``'s)."""
        self.location = location
        self._ca = ca
        self._client = flight_client(location, ca)
        self._options = call_options(token, timeout_s)
        # How long an unreachable dispatcher is retried: a job's master may be restarting (it comes
        # back on the same port with its state from the job store, or, in a pod, at a new address
        # that ``locate`` — by default ``$PRIMUS_DISPATCHER_FILE`` — tells).
        self.grace_s = grace_s
        self._locate = locate if locate is not None else location_file()
        self._moving = threading.Lock()

    def _await_move(self, deadline: float) -> bool:
        """Whether ``locate`` names another dispatcher before ``deadline`` (then it is dialled)."""
        if self._locate is None:
            return False
        was = self.location
        while True:
            self._follow()
            if self.location != was:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)  # a file the kubelet rewrites: nothing to block on

    def _follow(self) -> None:
        """Dial the dispatcher where ``locate`` says it is now, when that changed."""
        if self._locate is None:
            return
        now = self._locate()
        with self._moving:
            if now and now != self.location:
                log.warning("the dispatcher moved: %s -> %s", self.location, now)
                # The old client is not closed here: another thread may be in a call on it.
                self._client, self.location = flight_client(now, self._ca), now

    def _call(self, kind: str, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.grace_s
        delay = 0.05
        while True:
            try:
                results: Iterable[Any] = self._client.do_action(
                    flight.Action(kind, dumps(body)), self._options
                )
                return loads(next(iter(results)).body.to_pybytes())
            except flight.FlightUnavailableError:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                self._follow()
            except flight.FlightTimedOutError:
                # No answer: a master whose pod (and address) vanished mid-call looks like this. The
                # call is repeated only at its successor's address (the old master's leases went with
                # it); one that stays where it was is slow, not gone, and a repeated lease could
                # strand the first: that is the caller's failure, as before.
                if not self._await_move(deadline):
                    raise

    def register(self, executor: str, location: str) -> bool:
        """False: refused, this incarnation is fenced (the master replaced it)."""
        return bool(self._call("register", {"executor": executor, "location": location}))

    def heartbeat(self, executor: str, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self._call("heartbeat", {"executor": executor, "metrics": metrics})
        return result

    def lease(self, executor: str) -> dict[str, Any]:
        """A lease (``item_id``, ``task``, ``start_row``, ``end_row``) or ``{"finished": bool}`` or
        ``{"failed": message}``."""
        result: dict[str, Any] = self._call("lease", {"executor": executor})
        if "task" in result:
            result["task"] = task_from_dict(result["task"])
        return result

    def release(
        self,
        executor: str,
        item_id: str,
        total_rows: int | None,
        unlabelled: list[tuple[int, int]] | None = None,
    ) -> None:
        """``unlabelled``: the item's rows left out for having no label, as task row ranges."""
        body = {"executor": executor, "item_id": item_id, "total_rows": total_rows}
        self._call("release", {**body, "unlabelled": unlabelled or []})

    def fail(self, executor: str, item_id: str, error: str, file: str | None = None) -> None:
        """``file``: the file the error is about, when the executor knows it."""
        self._call("fail", {"executor": executor, "item_id": item_id, "error": error, "file": file})

    def ack(self, acks: dict[str, list[tuple[int, int]]]) -> None:
        self._call("ack", {"acks": acks})

    def report(self, executor: str, metrics: dict[str, Any]) -> list[dict[str, Any]]:
        """Telemetry of an executor that leases nothing; returns the master's commands for it."""
        result: dict[str, Any] = self._call("report", {"executor": executor, "metrics": metrics})
        commands: list[dict[str, Any]] = result["commands"]
        return commands

    def rewind(self, progress: dict[str, list[tuple[int, int]]]) -> None:
        """Reset consumption to a trainer's checkpointed progress (its restart after a crash)."""
        self._call("rewind", {"progress": progress})

    def claim(self, claims: dict[str, list[tuple[int, int]]]) -> dict[str, list[tuple[int, int]]]:
        """Per task, the rows of ``claims`` that are now this consumer's (see ``Dispatcher.claim``)."""
        result = self._call("claim", {"claims": claims})
        return {t: [(int(a), int(b)) for a, b in rs] for t, rs in result.items()}

    def rendezvous(self, generation: int, address: str | None = None) -> dict[str, Any]:
        """Publish (``address``) or look up where the trainer group of ``generation`` meets."""
        result: dict[str, Any] = self._call("rendezvous", {"generation": generation, "address": address})
        return result

    def finished(self) -> dict[str, bool]:
        result: dict[str, bool] = self._call("finished", {})
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("status", {})
        return result

    def close(self) -> None:
        self._client.close()
