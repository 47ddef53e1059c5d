"""What every server the demo and the tests start as one process has alike: a session of its own
tied to its launcher (a killed pytest leaves no server behind), a log in its work dir whose tail goes
into a start-up error, a stop that ends its whole process group, and use as a context manager.

A server class derives from :class:`ServerProcess`, implements ``start`` (its command, its readiness
check) and calls :meth:`ServerProcess.spawn`; everything else is here once.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

from airflow_provider_primus.process import stop_process_group, tied_to_launcher

__all__ = ["LOOPBACK", "ServerProcess", "free_ports"]

LOOPBACK = "127.0.0.1"
State = TypeVar("State")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held open together while chosen, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class ServerProcess(Generic[State]):
    """One server process in ``workdir``, logging to ``workdir/<log_name>``; ``state`` once started."""

    log_name = "server.log"
    stop_grace_s = 30.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.state: State | None = None

    @property
    def log_file(self) -> Path:
        return self.workdir / self.log_name

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``command`` in ``workdir``, in a session of its own, output appended to the log."""
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                tied_to_launcher(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )
        return self.process

    def start(self) -> State:
        raise NotImplementedError

    def stop(self, grace_s: float | None = None) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            grace = self.stop_grace_s if grace_s is None else grace_s
            stop_process_group(process.pid, child=process, grace_s=grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        self.state = None

    def __enter__(self) -> State:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
