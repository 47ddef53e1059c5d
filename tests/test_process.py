"""The launch guard: children we start die with their launcher, and launching stays safe while the
parent runs many threads (the CI hang came from a ``preexec_fn`` racing other threads' locks)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import psutil

from airflow_provider_primus.process import pid_alive, stop_process_group, tied_to_launcher


def test_child_is_terminated_when_its_launcher_dies() -> None:
    launcher = textwrap.dedent(
        """
        import subprocess, sys, time
        from airflow_provider_primus.process import tied_to_launcher
        code = "import time; print('up', flush=True); time.sleep(120)"
        child = subprocess.Popen(tied_to_launcher([sys.executable, "-c", code]), stdout=subprocess.PIPE)
        child.stdout.readline()  # it runs the real command now
        print(child.pid, flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    child = int(proc.stdout.readline())
    try:
        assert psutil.Process(child).cmdline()[1] == "-c"  # the guard exec'd the command in place
        proc.kill()  # the launcher dies without any clean-up
        proc.wait()
        psutil.Process(child).wait(timeout=10)  # reaped by init once PDEATHSIG ended it
        assert not pid_alive(child)
    finally:
        if pid_alive(child):
            stop_process_group(child, grace_s=1)


def test_launching_many_children_next_to_busy_threads_never_hangs() -> None:
    stop = threading.Event()

    def churn() -> None:  # allocate, import-lock and log from other threads while we fork
        while not stop.is_set():
            bytearray(1 << 16)
            __import__("json").dumps({"x": list(range(100))})

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        started = time.monotonic()
        for _ in range(30):
            child = subprocess.Popen(tied_to_launcher(["true"]))
            assert child.wait(timeout=20) == 0
        assert time.monotonic() - started < 60
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_stop_requested_returns_on_sigterm_without_taking_a_lock() -> None:
    code = textwrap.dedent(
        """
        import sys
        from airflow_provider_primus.process import StopRequested
        stop = StopRequested()
        print("ready", flush=True)
        while not stop.wait(0.5):
            pass
        print("stopped", flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.terminate()
        assert proc.stdout.readline().strip() == "stopped"
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
