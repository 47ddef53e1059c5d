"""Child-process lifecycle helpers shared by every service the provider launches (Kafka broker,
Airflow in the demo, later the executors): nothing we start may outlive its owner by accident.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_primus.errors import is_terminal, one_line

_GUARD = Path(__file__).with_name("_orphan_guard.py")

# Where an executor records its exit code: a restarted master re-adopted it, so it is not the
# process's parent and cannot wait() for the code. Set by the master, honoured by `primus`'s entry.
EXIT_FILE_ENV = "PRIMUS_EXIT_FILE"
# The exit code of an executor that ended on an error no retry can fix (``errors.TerminalError``): its
# master fails the job at once with the error instead of spending the role's restarts. 78 is
# sysexits' EX_CONFIG ("configuration error"); it travels where a file cannot (a pod's status).
EXIT_TERMINAL = 78
EXIT_FAILED = 1  # any other exception: what Python itself exits with
ERROR_LIMIT = 500  # characters of the last error a status, an event and a task log carry
# The `primus` command as a module, run by the interpreter that runs the master: executors get the
# same installation whatever PATH says.
PRIMUS_MODULE = "airflow_provider_primus.cli.main"


def error_file(exit_file: Path) -> Path:
    """Where an executor leaves its last error, beside its exit code: the master puts it in the
    failure it reports, so the status says why and not only "exited with code 1"."""
    return exit_file.with_suffix(".error")


def run_executor(body: Callable[[], int], exit_file: Path) -> int:
    """Run an executor's ``body`` and leave its master what it needs to settle its end: the exit
    code in ``exit_file`` (the master may not be its parent), and an exception it ended on as one
    line in ``error_file``, the exit code saying whether a retry can help (``EXIT_TERMINAL``).
    The traceback still goes to the executor's log."""
    errors = error_file(exit_file)
    errors.unlink(missing_ok=True)
    try:
        code = body()
    except Exception as exc:
        traceback.print_exc()
        code = EXIT_TERMINAL if is_terminal(exc) else EXIT_FAILED
        with contextlib.suppress(OSError):  # a full disk may refuse this too: the code still says it
            errors.write_text(one_line(exc, ERROR_LIMIT) + "\n", encoding="utf-8")
    exit_file.write_text(str(code))
    return code


def read_error(exit_file: Path) -> str | None:
    """The last error an executor left beside ``exit_file``, if any."""
    try:
        text = error_file(exit_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def primus_command(*args: str) -> list[str]:
    return [sys.executable, "-m", PRIMUS_MODULE, *args]


def tied_to_launcher(command: Sequence[str], sig: int = signal.SIGTERM) -> list[str]:
    """``command`` wrapped so Linux sends ``sig`` to it when the thread launching it dies.

    The wrapper is a tiny stdlib-only script started with ``python -S`` (about 20 ms); it calls
    ``prctl`` in the child and execs ``command``. See ``_orphan_guard`` for why this is not a
    ``preexec_fn``.
    """
    return [sys.executable, "-S", "-E", str(_GUARD), str(os.getpid()), str(int(sig)), "--", *command]


class StopRequested:
    """SIGINT/SIGTERM handlers that take no lock, for a main thread that waits for the end.

    The obvious ``signal.signal(SIGTERM, lambda *_: event.set())`` can deadlock: the handler runs on
    the main thread between bytecodes, possibly while that thread holds the Event's own lock inside
    ``event.wait()``, and ``set()`` then waits for it for ever. We saw executors hang exactly so.
    """

    def __init__(self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
        self.requested = False
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True as soon as a stop was requested."""
        deadline = time.monotonic() + timeout_s
        while not self.requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.1))
        return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(pid: int, child: subprocess.Popen[Any] | None, timeout_s: float) -> bool:
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):  # not our child: no wait() to block on, so poll its /proc entry
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_process_group(
    pid: int,
    *,
    child: subprocess.Popen[Any] | None = None,
    first_signal: int = signal.SIGTERM,
    grace_s: float = 30.0,
) -> None:
    """Signal a process group (the leader was started with ``start_new_session=True``), wait for a
    clean exit, then SIGKILL the whole group so no grandchild survives either."""
    _signal_group(pid, first_signal)
    if not _wait_gone(pid, child, grace_s):
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, child, 10.0)
    # Grandchildren that ignored the first signal go with the group.
    _signal_group(pid, signal.SIGKILL)
