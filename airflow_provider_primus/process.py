"""Child-process lifecycle helpers shared by every service the provider launches (Kafka broker,
Airflow in the demo, later the executors): nothing we start may outlive its owner by accident.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` asking Linux to send ``sig`` to the child when its launching thread dies.

    libc is loaded here, in the parent, so the child between fork and exec only makes one system
    call and takes no lock: that is what makes this ``preexec_fn`` safe next to other threads.
    """
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl

    def _preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)

    return _preexec


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
