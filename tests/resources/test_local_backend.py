"""The local backend against real processes: affinity, in-place resize, the CPU throttle, the memory
watchdog, termination and adoption by a restarted master.

Child scripts live in the session's temp dir, so the session's leak check sees any child a test
fails to stop; every test also stops what it starts through the ``executors`` fixture.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.process import pid_alive
from airflow_provider_primus.resources import cgroups, procfs
from airflow_provider_primus.resources.allotment import AllotmentWatcher
from airflow_provider_primus.resources.backend import Allotment, Handle, LaunchRequest, Observation
from airflow_provider_primus.resources.local import LocalBackend

MiB = 1 << 20
GiB = 1 << 30
CORES = sorted(os.sched_getaffinity(0))

BUSY = """
import pathlib, sys
pathlib.Path(sys.argv[1]).write_text("ready")
while True:
    pass
"""
HOG = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("ready")
chunks = []
while True:
    chunk = bytearray(10 << 20)
    chunk[::4096] = b"\\x01" * (len(chunk) // 4096)  # touch every page: resident, not just mapped
    chunks.append(chunk)
    time.sleep(0.02)
"""
SLEEPER = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("ready")
time.sleep(120)
"""


def wait_for(predicate: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


def observe_until(
    backend: LocalBackend, handle: Handle, done: Callable[[Observation], bool], what: str
) -> Observation:
    def check() -> Observation | None:
        obs = backend.observe([handle])[handle.name]
        return obs if done(obs) else None

    result: Observation = wait_for(check, what=what)
    return result


def state(pid: int) -> str | None:
    st = procfs.stat(pid)
    return st.state if st is not None else None


class Executors:
    """Backends and executors of one test, all stopped at its end whatever happened."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[tuple[LocalBackend, Handle]] = []
        self.backends: list[LocalBackend] = []

    def backend(self, **kwargs: Any) -> LocalBackend:
        backend = LocalBackend(self.workdir, **kwargs)
        self.backends.append(backend)
        return backend

    def launch(
        self, backend: LocalBackend, name: str, code: str, cpu: float = 1.0, memory: int = GiB
    ) -> tuple[Handle, Path]:
        """Run ``code`` as a script; it gets a path to signal readiness (or report) as argv[1]."""
        script = self.workdir / f"{name}.py"
        script.write_text(textwrap.dedent(code))
        out = self.workdir / f"{name}.out"
        handle = backend.launch(
            LaunchRequest(
                name, "data", 0, Allotment(cpu, memory), [sys.executable, str(script), str(out)], {}
            )
        )
        self.started.append((backend, handle))
        return handle, out

    def stop(self) -> None:
        for backend, handle in self.started:
            backend.terminate(handle, grace_s=1.0)
        for backend in self.backends:
            backend.close()


@pytest.fixture
def executors(session_tmp: Path, request: pytest.FixtureRequest) -> Iterator[Executors]:
    workdir = session_tmp / "local-backend" / request.node.name
    workdir.mkdir(parents=True)
    ex = Executors(workdir)
    try:
        yield ex
    finally:
        ex.stop()


def cpu_rate(backend: LocalBackend, handle: Handle, window_s: float) -> tuple[float, float]:
    """Cores used over a measuring window (a window is what is measured, so it is slept through), and
    the fraction of it the (single-threaded) process was runnable, i.e. running or waiting for a CPU
    (schedstat): that one shows whether the throttle held it back, whatever other load shares the core.
    """

    def runnable_ns() -> int:
        run, wait, _ = Path(f"/proc/{handle.ref['pid']}/schedstat").read_text().split()
        return int(run) + int(wait)

    first, first_ns = backend.observe([handle])[handle.name], runnable_ns()
    time.sleep(window_s)
    last, last_ns = backend.observe([handle])[handle.name], runnable_ns()
    assert last.alive
    return (last.cpu_s - first.cpu_s) / (last.t - first.t), (last_ns - first_ns) / 1e9 / (last.t - first.t)


def test_launch_pins_cores_and_hands_over_the_allotment(executors: Executors) -> None:
    backend = executors.backend()
    report = """
    import json, os, pathlib, sys, time
    seen = {k: os.environ.get(k) for k in ("PRIMUS_ALLOTMENT_FILE", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    seen["affinity"] = sorted(os.sched_getaffinity(0))
    pathlib.Path(sys.argv[1] + ".tmp").write_text(json.dumps(seen))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
    """
    first, out = executors.launch(backend, "first", report, cpu=1.0, memory=256 * MiB)
    seen = json.loads(wait_for(lambda: out.exists() and out.read_text(), what="the child's report"))

    assert first.ref["cores"] == CORES[:1]  # the least allotted core, lowest id first
    assert os.sched_getaffinity(first.ref["pid"]) == set(first.ref["cores"])
    assert seen["affinity"] == first.ref["cores"]  # pinned before the program's first instruction
    assert seen["PRIMUS_ALLOTMENT_FILE"] == first.ref["allotment_file"]
    assert seen["OMP_NUM_THREADS"] == seen["MKL_NUM_THREADS"] == "1"
    assert json.loads(Path(first.ref["allotment_file"]).read_text()) == {
        "cpu": 1.0,
        "memory": 256 * MiB,
        "cores": first.ref["cores"],
    }
    assert Path(first.ref["log"]).exists()
    assert first.ref["start_time"] == procfs.stat(first.ref["pid"]).start_time  # type: ignore[union-attr]

    second, _ = executors.launch(backend, "second", SLEEPER, cpu=0.5)
    assert second.ref["cores"] == CORES  # a fraction floats over every core, held by its quota
    third, _ = executors.launch(backend, "third", SLEEPER, cpu=1.0)
    assert third.ref["cores"] == (CORES[1:2] if len(CORES) > 1 else CORES[:1])  # spread out


def test_resize_in_place_moves_every_thread_and_the_executor_follows(executors: Executors) -> None:
    if len(CORES) < 2:
        pytest.skip("needs two cores to grow onto")
    backend = executors.backend()
    child = """
    import json, os, sys, threading, time
    import pyarrow
    from airflow_provider_primus.resources.allotment import AllotmentWatcher

    out = sys.argv[1]
    stop = threading.Event()
    for _ in range(3):
        threading.Thread(target=stop.wait, daemon=True).start()
    watcher = AllotmentWatcher()

    def report(a):
        seen = {"cpu": a.cpu, "memory": a.memory, "cores": watcher.cores, "arrow": pyarrow.cpu_count()}
        with open(out + ".tmp", "w") as f:
            json.dump(seen, f)
        os.replace(out + ".tmp", out)

    first = watcher.current()
    watcher.apply_threads(first)
    report(first)
    watcher.start_thread(interval_s=0.02, on_change=report)
    time.sleep(120)
    """
    handle, out = executors.launch(backend, "trainer", child, cpu=1.0, memory=512 * MiB)
    pid, cores = handle.ref["pid"], handle.ref["cores"]

    def seen() -> dict[str, Any] | None:
        return json.loads(out.read_text()) if out.exists() else None

    assert wait_for(seen, what="the first report")["cpu"] == 1.0
    tids = procfs.tasks(pid)
    assert len(tids) >= 4
    assert all(os.sched_getaffinity(t) == set(cores) for t in tids)
    before = Path(handle.ref["allotment_file"]).read_text()

    grown = backend.resize(handle, Allotment(2.0, GiB))

    assert grown.ref["pid"] == pid and grown.allotment == Allotment(2.0, GiB)
    assert grown.ref["cores"] == CORES[:2]
    assert all(os.sched_getaffinity(t) == set(CORES[:2]) for t in procfs.tasks(pid))
    after = Path(handle.ref["allotment_file"]).read_text()
    assert after != before
    assert json.loads(after) == {"cpu": 2.0, "memory": GiB, "cores": CORES[:2]}
    report = wait_for(lambda: (s := seen()) and s["cpu"] == 2.0 and s, what="the executor to see the resize")
    assert report == {"cpu": 2.0, "memory": GiB, "cores": CORES[:2], "arrow": 2}
    assert backend.observe([grown])["trainer"].alive


def test_fractional_cpu_is_throttled_and_never_left_stopped(executors: Executors) -> None:
    """The fallback where no cgroup is writable: the SIGSTOP/SIGCONT duty cycle."""
    backend = executors.backend(cores=CORES[:1], cgroups="off")
    handle, ready = executors.launch(backend, "busy", BUSY, cpu=0.25)
    wait_for(ready.exists, what="the busy loop")
    pid = handle.ref["pid"]

    assert 0.12 < cpu_rate(backend, handle, 2.0)[0] < 0.4
    full = backend.resize(handle, Allotment(1.0, GiB))
    rate, runnable = cpu_rate(backend, full, 1.0)
    # A full core, unless other processes of this shared machine took part of it: then the busy loop
    # was still runnable all along, i.e. nothing stopped it.
    assert rate > 0.7 or runnable > 0.95, (rate, runnable)
    assert state(pid) != "T"

    throttled = backend.resize(full, Allotment(0.1, GiB))
    wait_for(lambda: state(pid) == "T", what="the throttle to stop it")
    backend.close()  # a master going away continues what it stopped
    for _ in range(10):
        assert state(pid) in ("R", "S")
        time.sleep(0.01)

    # A restarted master resumes the throttle; terminate continues the stopped process, so SIGTERM
    # ends it at once rather than after the grace.
    restarted = executors.backend(cores=CORES[:1], cgroups="off")
    assert restarted.adopt(throttled)
    wait_for(lambda: state(pid) == "T", what="the adopted throttle to stop it")
    began = time.monotonic()
    restarted.terminate(throttled, grace_s=5.0)
    assert time.monotonic() - began < 2.0
    obs = restarted.observe([throttled])["busy"]
    assert not obs.alive and obs.reason == "terminated"
    assert backend.observe([throttled])["busy"].exit_code == -signal.SIGTERM  # reaped by its parent


def test_memory_watchdog_kills_before_the_limit(executors: Executors) -> None:
    events: list[tuple[str, str, dict[str, Any]]] = []
    limit = 200 * MiB
    backend = executors.backend(  # the fallback where no cgroup is writable
        watchdog_interval_s=0.01, kill_fraction=0.9, on_event=lambda *e: events.append(e), cgroups="off"
    )
    hog = HOG
    handle, _ = executors.launch(backend, "hog", hog, memory=limit)

    wait_for(lambda: any(kind == "MemoryLimit" for kind, _, _ in events), what="the watchdog's kill")
    obs = observe_until(backend, handle, lambda o: not o.alive, "the killed process to end")
    assert obs.exit_code == -signal.SIGKILL
    assert obs.reason is not None and obs.reason.startswith("memory limit: rss ")
    assert obs.reason.endswith(f"reached 90% of {limit}")
    kinds = [kind for kind, _, _ in events]
    assert kinds == ["MemoryPressure", "MemoryLimit"]
    killed = events[1][2]
    assert events[1][1] == "hog" and killed["reason"] == obs.reason
    assert 0.9 * limit <= killed["rss"] < limit  # it acted before the limit was reached


def test_terminate_escalates_to_sigkill_and_is_idempotent(executors: Executors) -> None:
    backend = executors.backend()
    stubborn = """
    import pathlib, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    grandchild = subprocess.Popen([sys.executable, "-c", code])
    pathlib.Path(sys.argv[1]).write_text(str(grandchild.pid))
    time.sleep(120)
    """
    handle, out = executors.launch(backend, "stubborn", stubborn)
    grandchild = int(wait_for(lambda: out.exists() and out.read_text(), what="the grandchild"))

    began = time.monotonic()
    backend.terminate(handle, grace_s=0.5)
    assert 0.5 <= time.monotonic() - began < 3.0
    assert not pid_alive(handle.ref["pid"])
    wait_for(lambda: not pid_alive(grandchild), what="the grandchild to go with the group")
    obs = backend.observe([handle])["stubborn"]
    assert not obs.alive and obs.exit_code == -signal.SIGKILL and obs.reason == "terminated"

    began = time.monotonic()
    backend.terminate(handle, grace_s=5.0)  # again: nothing left, nothing to wait for
    assert time.monotonic() - began < 0.5


def test_a_restarted_master_adopts_running_executors_only(executors: Executors) -> None:
    first = executors.backend()
    handle, ready = executors.launch(first, "survivor", SLEEPER, cpu=1.0)
    wait_for(ready.exists, what="the child")
    first.close()  # the master goes away; its executor keeps running

    restarted = executors.backend()
    record = Handle.from_dict(json.loads(json.dumps(handle.to_dict())))  # as stored in the job status
    assert restarted.adopt(record)
    assert restarted.observe([record])["survivor"].alive
    if len(CORES) > 1:  # the adopted executor's core counts as allotted
        newcomer, _ = executors.launch(restarted, "newcomer", SLEEPER, cpu=1.0)
        assert newcomer.ref["cores"] != record.ref["cores"]

    recycled = Handle.from_dict({**record.to_dict(), "ref": {**record.ref, "start_time": 1}})
    assert not restarted.adopt(recycled)  # same pid, another process's start time
    assert not restarted.adopt(Handle("nobody", "data", 0, Allotment(1, GiB)))

    restarted.terminate(record, grace_s=1.0)
    assert not restarted.adopt(record)
    assert not restarted.observe([record])["survivor"].alive
    assert first.observe([handle])["survivor"].exit_code == -signal.SIGTERM  # reaped by its parent


def test_observe_reports_growing_cpu_rss_and_the_exit_code(executors: Executors) -> None:
    backend = executors.backend()
    busy, ready = executors.launch(backend, "busy", BUSY)
    wait_for(ready.exists, what="the busy loop")
    start = backend.observe([busy])["busy"]
    assert start.alive and start.rss > 0 and start.exit_code is None and start.reason is None
    grown = observe_until(backend, busy, lambda o: o.cpu_s >= start.cpu_s + 0.2, "cpu_s to grow")
    assert grown.alive and grown.t > start.t and grown.read_bytes >= 0 and grown.write_bytes >= 0

    quitter, _ = executors.launch(backend, "quitter", "import sys; sys.exit(3)")
    ended = observe_until(backend, quitter, lambda o: not o.alive, "the exit")
    # (rss is the peak since the previous observation: the watchdog may have sampled the short life)
    assert ended.exit_code == 3 and ended.reason == "exited"


def test_cgroup_v2_limits_where_delegated(
    executors: Executors, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This machine has no delegated cgroup v2, so a directory stands in for the cgroup file system:
    the backend's writes, and the wrapper joining the cgroup before exec, are what is checked."""
    assert cgroups.delegated_cgroup() is None  # v1 here (or the watchdog) guards memory
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    own = next(line[3:] for line in lines if line.startswith("0::"))
    fake = tmp_path / "cgroupfs" / own.lstrip("/")  # our own cgroup, as delegated to us
    fake.mkdir(parents=True)
    for name in ("memory.max", "cgroup.subtree_control", "cgroup.procs"):
        (fake / name).write_text("")
    monkeypatch.setattr(cgroups, "CGROUP_FS", tmp_path / "cgroupfs")
    assert cgroups.delegated_cgroup() == fake
    backend = executors.backend(cgroups="v2")
    handle, ready = executors.launch(backend, "boxed", SLEEPER, memory=300 * MiB)
    wait_for(ready.exists, what="the child")

    # No cpu controller delegated (no cgroup.controllers naming it): CPU stays with the duty cycle.
    assert handle.ref["enforcement"] == {"cpu": "duty-cycle", "memory": "cgroup-v2"}
    group = Path(handle.ref["cgroup_memory"])
    assert group == fake / "primus-boxed"
    assert (fake / "cgroup.subtree_control").read_text() == "+memory"
    assert (group / "memory.max").read_text() == str(300 * MiB)
    assert (group / "memory.oom.group").read_text() == "1"
    assert (group / "cgroup.procs").read_text() == str(handle.ref["pid"])  # joined before exec

    backend.resize(handle, Allotment(1.0, 400 * MiB))
    assert (group / "memory.max").read_text() == str(400 * MiB)

    (group / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    os.killpg(handle.ref["pid"], signal.SIGKILL)  # as the kernel's OOM killer would
    obs = observe_until(backend, handle, lambda o: not o.alive, "the kill")
    assert obs.reason == f"memory limit: killed by the kernel at {400 * MiB}"


def test_allotment_watcher_reports_changes_once(tmp_path: Path) -> None:
    path = tmp_path / "allotment.json"
    assert AllotmentWatcher(path).current() is None
    path.write_text(json.dumps({"cpu": 1.5, "memory": GiB, "cores": [0, 1]}))
    watcher = AllotmentWatcher(path)
    assert watcher.current() == Allotment(1.5, GiB) and watcher.cores == [0, 1]
    assert watcher.poll() is None  # nothing changed since start-up

    for cpu in (0.5, 3.0):  # same size, same timestamp tick: the new inode still shows the change
        tmp = tmp_path / "tmp"
        tmp.write_text(json.dumps({"cpu": cpu, "memory": GiB, "cores": [0]}))
        os.replace(tmp, path)
        assert watcher.poll() == Allotment(cpu, GiB)
        assert watcher.poll() is None

    import pyarrow

    before = pyarrow.cpu_count()
    try:
        AllotmentWatcher.apply_threads(Allotment(2.5, GiB))
        assert pyarrow.cpu_count() == 3
    finally:
        pyarrow.set_cpu_count(before)


def v1_writable() -> str | None:
    """Why real cgroup v1 limits cannot be tested here, or None when they can."""
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    for controller in ("cpu", "memory"):
        base = cgroups.CGROUP_FS / controller
        if controller not in own or not (base / "cgroup.procs").exists():
            return f"no cgroup v1 {controller} hierarchy mounted at {base}"
        if not os.access(base / own[controller].lstrip("/"), os.W_OK):
            return f"cgroup v1 {controller} group {own[controller]} is not writable (run as root)"
    return None


def group_of(pid: int, controller: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    raise AssertionError(f"{pid} has no {controller} group")


def test_cgroup_v1_quota_and_limit_enforced_by_the_kernel_and_resized_in_place(executors: Executors) -> None:
    if (why := v1_writable()) is not None:
        pytest.skip(why)
    backend = executors.backend(cores=CORES[:1], cgroups="v1")
    handle, ready = executors.launch(backend, "busy", BUSY, cpu=0.25, memory=300 * MiB)
    wait_for(ready.exists, what="the busy loop")
    pid = handle.ref["pid"]
    assert handle.ref["enforcement"] == {"cpu": "cgroup-v1", "memory": "cgroup-v1"}
    cpu_dir, memory_dir = Path(handle.ref["cgroup_cpu"]), Path(handle.ref["cgroup_memory"])
    # The executor is in its own groups (joined before exec), under a directory of this job.
    assert cgroups.CGROUP_FS / "cpu" / group_of(pid, "cpu").lstrip("/") == cpu_dir
    assert cgroups.CGROUP_FS / "memory" / group_of(pid, "memory").lstrip("/") == memory_dir
    assert cpu_dir.parent.name.startswith("primus-") and cpu_dir.name == "primus-busy"
    assert (cpu_dir / "cpu.cfs_quota_us").read_text().strip() == "25000"
    assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 300 * MiB

    assert 0.12 < cpu_rate(backend, handle, 2.0)[0] < 0.4  # the kernel's quota, no SIGSTOP
    assert state(pid) != "T"
    grown = backend.resize(handle, Allotment(1.0, 400 * MiB))
    assert grown.ref["pid"] == pid
    assert (cpu_dir / "cpu.cfs_quota_us").read_text().strip() == "100000"
    assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 400 * MiB
    rate, runnable = cpu_rate(backend, grown, 1.0)
    assert rate > 0.7 or runnable > 0.95, (rate, runnable)

    backend.terminate(grown, grace_s=1.0)
    assert not cpu_dir.exists() and not memory_dir.exists()
    backend.close()
    assert not cpu_dir.parent.exists()  # the job's directory goes with its last executor


def test_cgroup_v1_memory_limit_is_the_kernels(executors: Executors) -> None:
    if (why := v1_writable()) is not None:
        pytest.skip(why)
    events: list[tuple[str, str, dict[str, Any]]] = []
    backend = executors.backend(cgroups="v1", on_event=lambda *e: events.append(e))
    handle, _ = executors.launch(backend, "hog", HOG, memory=200 * MiB)
    obs = observe_until(backend, handle, lambda o: not o.alive, "the kernel's OOM kill")
    assert obs.exit_code == -signal.SIGKILL
    assert obs.reason == f"memory limit: killed by the kernel at {200 * MiB}"
    assert "MemoryLimit" not in [kind for kind, _, _ in events]  # not the watchdog's doing
