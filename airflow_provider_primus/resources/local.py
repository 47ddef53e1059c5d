"""The local backend: executors are OS processes on this machine.

Cores come from CPU affinity (set before the program starts, changed in place on resize). Where
this process may create cgroups (v1 as root, or a delegated v2 subtree: ``resources/cgroups.py``)
the kernel enforces the CPU quota and the memory limit of each executor's own group, rewritten in
place on resize. Elsewhere a fractional share is enforced from outside like ``cpulimit``
(SIGSTOP/SIGCONT against a token bucket) and memory by an RSS watchdog that kills at
``kill_fraction`` of the limit, before the kernel's OOM killer would pick a victim (possibly the
master) on its own. Each executor's ``ref`` says which mechanism is in force (``enforcement``).

Executors run in their own session and are not tied to the launcher: a restarted master re-adopts
them from their handles (pid + start time, so a recycled pid is never mistaken for ours).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_primus.resources import procfs
from airflow_provider_primus.resources.allotment import thread_env
from airflow_provider_primus.resources.backend import Allotment, Handle, LaunchRequest, Observation
from airflow_provider_primus.resources.cgroups import Groups, Hierarchy, Setting
from airflow_provider_primus.resources.own_usage import OWN_CGROUP_ENV

log = logging.getLogger(__name__)

_WRAPPER = Path(__file__).resolve().parents[1] / "_affinity_exec.py"
_TICK_S = 0.015  # throttle period: short enough that a stopped executor never stalls for long
_BURST_S = 0.05  # core-seconds a throttled executor may run ahead of its quota
_PRESSURE_FRACTION = 0.85

EventSink = Callable[[str, str, dict[str, Any]], None]
_Event = tuple[str, str, dict[str, Any]]


@dataclasses.dataclass
class _Bucket:
    """Tokens are core-seconds refilled at ``rate`` per second. A negative balance is debt paid off
    while stopped, so the long-run average is the quota however coarse the clock-tick accounting."""

    rate: float
    t: float
    cpu_s: float
    tokens: float = _BURST_S
    stopped: bool = False


@dataclasses.dataclass
class _Exec:
    handle: Handle
    pid: int
    start_time: int
    cores: list[int]
    popen: subprocess.Popen[bytes] | None = None
    groups: Groups | None = None
    bucket: _Bucket | None = None
    active: bool = False  # throttled, watched and counted in the per-core allotment
    pressure_sent: bool = False
    peak_rss: int = 0  # the watchdog's highest reading since the last observe
    reason: str | None = None
    high: tuple[float, int, int] = (0.0, 0, 0)  # cumulative counters reported: never go back


def import_path(paths: Sequence[str], existing: str | None = None) -> str:
    """``paths`` ahead of ``existing`` (this process's PYTHONPATH by default), as PYTHONPATH."""
    rest = os.environ.get("PYTHONPATH", "") if existing is None else existing
    return os.pathsep.join([*paths, rest]).strip(os.pathsep)


def _fallback() -> dict[str, str]:
    return {"cpu": "duty-cycle", "memory": "watchdog"}


def _copy(handle: Handle) -> Handle:
    """Handles are the caller's to keep and mutate; the backend's own record stays apart."""
    return dataclasses.replace(handle, ref=dict(handle.ref))


def _write_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # a reader sees the old or the new allotment, never half of one


def _wait_gone(pid: int, start: int, popen: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    if popen is None:
        return procfs.wait_ended(pid, start, timeout_s)  # not our child: nothing to wait() on
    try:
        popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


class LocalBackend:
    parallel_launch = False  # processes start one by one: each start-up competes for the same cores

    def __init__(
        self,
        workdir: Path,
        *,
        cores: Sequence[int] | None = None,
        watchdog_interval_s: float = 0.1,
        kill_fraction: float = 0.95,
        on_event: EventSink | None = None,
        cgroups: Setting | None = None,
        python: str | None = None,
        paths: Sequence[str] = (),
    ) -> None:
        """``cgroups``: ``auto`` (the default; ``PRIMUS_LOCAL_CGROUPS`` overrides) uses whichever
        cgroup version is writable, ``v1``/``v2`` only that one, ``off`` the duty cycle and watchdog.
        ``python``: the interpreter that runs the executors in place of this one (the job's
        ``backend.local.python``); ``paths``: folders ahead on their import path."""
        self.python = python
        self.paths = list(paths)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._cores = sorted(os.sched_getaffinity(0) if cores is None else cores)
        if not self._cores:
            raise ValueError("no cores to allot")
        self._interval = watchdog_interval_s
        self._kill_fraction = kill_fraction
        self._on_event = on_event
        self._lock = threading.Condition()
        self._execs: dict[str, _Exec] = {}
        self._load = dict.fromkeys(self._cores, 0.0)
        setting = cgroups or os.environ.get("PRIMUS_LOCAL_CGROUPS", "auto")
        if setting not in ("auto", "v1", "v2", "off"):
            raise ValueError(f"cgroups must be auto, v1, v2 or off (got {setting!r})")
        self._hierarchy = Hierarchy.detect(str(self.workdir.resolve()), setting)  # type: ignore[arg-type]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- the Backend contract --------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Handle:
        name, allotment, command = request.name, request.allotment, list(request.command)
        afile = self.workdir / f"{name}.allotment.json"
        logfile = self.workdir / f"{name}.log"
        full_env = {**os.environ, **request.env, "PRIMUS_ALLOTMENT_FILE": str(afile), **thread_env(allotment)}
        if self.python is not None and command and command[0] == sys.executable:
            command[0] = self.python  # the job's environment runs `primus`, not the master's
        if self.paths:
            full_env["PYTHONPATH"] = import_path(self.paths, full_env.get("PYTHONPATH"))
        # cgroup v2: the executor's group holds all its use, so it may measure itself there (v1
        # here has no per-executor cpuacct group: /proc it is, which this backend reads too).
        if self._hierarchy is not None and self._hierarchy.version == 2:
            full_env[OWN_CGROUP_ENV] = "1"
        # The wrapper would only report a missing program in the log; fail here like Popen would.
        if not command or shutil.which(command[0], path=full_env.get("PATH")) is None:
            raise FileNotFoundError(f"cannot run {list(command)[:1]}")
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("the backend is closed")
            if (old := self._execs.get(name)) is not None and old.active:
                raise ValueError(f"executor {name!r} is already running")
            cores = self._pick_cores(allotment.cpu, [])
            _write_atomic(afile, {**allotment.to_dict(), "cores": cores})
            groups = None
            wrapper = [sys.executable, "-S", "-E", str(_WRAPPER), ",".join(map(str, cores))]
            if self._hierarchy is not None:
                groups = self._hierarchy.create(name, allotment.cpu, allotment.memory)
                for d in groups.dirs():
                    wrapper += ["--cgroup", str(d)]
            with open(logfile, "ab") as out:
                popen = subprocess.Popen(
                    [*wrapper, "--", *command],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                )
            st = procfs.stat(popen.pid)
            assert st is not None  # our unreaped child: at worst a zombie, never gone
            ref = {"pid": popen.pid, "start_time": st.start_time, "cores": list(cores), "log": str(logfile)}
            ref |= {"allotment_file": str(afile)}
            ref |= groups.to_ref() if groups else {"enforcement": _fallback()}
            ex = _Exec(
                Handle(name, request.role, request.index, allotment, ref),
                popen.pid,
                st.start_time,
                cores,
                popen,
                groups,
            )
            self._activate(ex)
            return _copy(ex.handle)

    def resize(self, handle: Handle, allotment: Allotment) -> Handle:
        with self._lock:
            ex = self._managed(handle)
            self._add_load(ex, -1)
            cores = self._pick_cores(allotment.cpu, ex.cores)
            if cores != ex.cores:
                procfs.set_affinity(ex.pid, cores)
            ex.cores = cores
            ex.handle = dataclasses.replace(
                ex.handle, allotment=allotment, ref={**ex.handle.ref, "cores": list(cores)}
            )
            self._add_load(ex, +1)
            if ex.groups is not None:
                Hierarchy.resize(ex.groups, allotment.cpu, allotment.memory)
            self._set_quota(ex)
            ex.pressure_sent = False
            # Last: the executor resizes its thread pools on seeing this, and the cores are set by now.
            _write_atomic(Path(ex.handle.ref["allotment_file"]), {**allotment.to_dict(), "cores": cores})
            return _copy(ex.handle)

    def terminate(self, handle: Handle, grace_s: float = 10.0) -> None:
        pid, start = int(handle.ref["pid"]), int(handle.ref["start_time"])
        with self._lock:
            ex = self._execs.get(handle.name)
            ex = ex if ex is not None and ex.pid == pid else None
            if ex is not None:
                if ex.reason is None and procfs.is_running(pid, start):
                    ex.reason = "terminated"
                self._deactivate(ex)  # no throttle may stop it again from here on
            popen = ex.popen if ex is not None else None
        # SIGCONT after SIGTERM: a stopped process only acts on the SIGTERM once continued. No grace
        # (a hung executor): SIGKILL alone, which ends a stopped process without waking it first.
        if grace_s > 0:
            procfs.signal_group(pid, start, signal.SIGTERM, signal.SIGCONT)
        if grace_s <= 0 or not _wait_gone(pid, start, popen, grace_s):
            procfs.signal_group(pid, start, signal.SIGKILL)
            _wait_gone(pid, start, popen, 5.0)
        procfs.signal_group(pid, start, signal.SIGKILL)  # group members that outlived their leader
        if ex is not None and ex.groups is not None:
            Hierarchy.remove(ex.groups)

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        links = procfs.parent_links()  # one /proc scan for all the trees
        with self._lock:
            return {h.name: self._observe(h, time.monotonic(), links) for h in handles}

    def adopt(self, handle: Handle) -> bool:
        pid, start = handle.ref.get("pid"), handle.ref.get("start_time")
        if pid is None or start is None or not procfs.is_running(int(pid), int(start)):
            return False
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("the backend is closed")
            ex = self._execs.get(handle.name)
            if ex is not None and ex.active and ex.pid == int(pid):
                return True
            cores = [int(c) for c in handle.ref.get("cores") or self._cores]
            groups = Groups.from_ref(handle.ref)
            self._activate(_Exec(_copy(handle), int(pid), int(start), cores, None, groups))
            return True

    def close(self) -> None:
        with self._lock:
            self._stop.set()
            for ex in self._execs.values():
                self._release_throttle(ex)
            self._lock.notify_all()
            threads, self._threads = self._threads, []
            alive = any(ex.active for ex in self._execs.values())
        for t in threads:
            t.join()
        if self._hierarchy is not None and not alive:
            self._hierarchy.close()

    # --- bookkeeping (callers hold the lock) ---------------------------------------------------

    def _managed(self, handle: Handle) -> _Exec:
        ex = self._execs.get(handle.name)
        if ex is None or ex.pid != int(handle.ref["pid"]):
            raise ValueError(f"executor {handle.name!r} is not managed by this backend (adopt it first)")
        if not ex.active or not procfs.is_running(ex.pid, ex.start_time):
            raise ProcessLookupError(f"executor {handle.name!r} is not running")
        return ex

    def _pick_cores(self, cpu: float, current: list[int]) -> list[int]:
        """Whole cores for a whole-number allotment (least allotted first); a fractional one may run
        on every core and is held to its share by the quota: pinned to one core, three half-core
        executors would queue on it while another core idles (measured in `primus bench autoscale`)."""
        if not float(cpu).is_integer():
            return list(self._cores)
        n = min(len(self._cores), max(1, math.ceil(cpu)))
        if len(current) == n:
            return list(current)  # same count: keep them, caches and all
        ranked = sorted(self._cores, key=lambda c: (self._load.get(c, 0.0), c not in current, c))
        return sorted(ranked[:n])

    def _add_load(self, ex: _Exec, sign: int) -> None:
        for c in ex.cores:
            self._load[c] = self._load.get(c, 0.0) + sign * ex.handle.allotment.cpu / len(ex.cores)

    def _activate(self, ex: _Exec) -> None:
        ex.active = True
        self._execs[ex.handle.name] = ex
        self._add_load(ex, +1)
        self._set_quota(ex)
        if not self._threads:
            for target in (self._throttle_loop, self._watch_loop):
                t = threading.Thread(target=target, name=f"primus-local-{target.__name__[1:]}", daemon=True)
                t.start()
                self._threads.append(t)

    def _deactivate(self, ex: _Exec) -> None:
        if not ex.active:
            return
        ex.active = False
        self._add_load(ex, -1)
        self._release_throttle(ex)
        if ex.groups is not None:
            if ex.reason is None and Hierarchy.oom_kills(ex.groups):
                ex.reason = f"memory limit: killed by the kernel at {ex.handle.allotment.memory}"
            Hierarchy.remove(ex.groups)

    def _set_quota(self, ex: _Exec) -> None:
        cpu = ex.handle.allotment.cpu
        if cpu >= len(ex.cores) or (ex.groups is not None and ex.groups.cpu is not None):
            # Affinity alone enforces whole cores; a cgroup's quota is the kernel's to enforce.
            self._release_throttle(ex)
        elif ex.bucket is not None:
            ex.bucket.rate = cpu
        elif (st := procfs.stat(ex.pid)) is not None:
            ex.bucket = _Bucket(rate=cpu, t=time.monotonic(), cpu_s=st.cpu_s)
            self._lock.notify_all()

    def _release_throttle(self, ex: _Exec) -> None:
        """Never leave a process stopped behind us."""
        if ex.bucket is not None and ex.bucket.stopped and procfs.is_running(ex.pid, ex.start_time):
            with contextlib.suppress(ProcessLookupError):
                os.kill(ex.pid, signal.SIGCONT)
        ex.bucket = None

    def _observe(self, h: Handle, now: float, links: procfs.Links | None) -> Observation:
        pid, start = int(h.ref["pid"]), int(h.ref["start_time"])
        ex = self._execs.get(h.name)
        ex = ex if ex is not None and ex.pid == pid else None
        exit_code = ex.popen.poll() if ex is not None and ex.popen is not None else None
        alive = exit_code is None and procfs.is_running(pid, start)
        if not alive and exit_code is None and ex is not None and ex.popen is not None:
            # Dying but not yet reapable (a SIGKILL still tearing the process down): its code
            # is a moment away, and an exit without one would read as lost.
            with contextlib.suppress(subprocess.TimeoutExpired):
                exit_code = ex.popen.wait(timeout=2.0)
        cpu, rss, rd, wr = procfs.usage(pid, links) if alive else (0.0, 0, 0, 0)
        reason = None
        if ex is not None:
            # Memory is bursty (a file decoded, a batch built): report the peak between two
            # observations, so a spike the master's pass did not land on still counts.
            rss, ex.peak_rss = max(rss, ex.peak_rss), 0
            # A descendant that exits unreaped drops out of the sums; the counters must not go back.
            cpu, rd, wr = max(cpu, ex.high[0]), max(rd, ex.high[1]), max(wr, ex.high[2])
            ex.high = (cpu, rd, wr)
            if not alive:
                self._deactivate(ex)
                reason = ex.reason
        if not alive:
            reason = reason or "exited"
        return Observation(h.name, now, alive, cpu, rss, rd, wr, exit_code, reason)

    # --- background threads ----------------------------------------------------------------------

    def _throttle_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._stop.is_set() and not any(ex.bucket for ex in self._execs.values()):
                    self._lock.wait()  # nothing fractional: sleep until a quota appears
                now = time.monotonic()
                for ex in self._execs.values():
                    if ex.bucket is not None:
                        self._throttle(ex, ex.bucket, now)
            self._stop.wait(_TICK_S)

    @staticmethod
    def _throttle(ex: _Exec, b: _Bucket, now: float) -> None:
        st = procfs.stat(ex.pid)
        if st is None or st.start_time != ex.start_time or st.state in ("Z", "X"):
            return  # ended: the watchdog or observe retires it
        b.tokens = min(_BURST_S, b.tokens + b.rate * (now - b.t) - (st.cpu_s - b.cpu_s))
        b.t, b.cpu_s = now, st.cpu_s
        over = b.tokens < 0
        with contextlib.suppress(ProcessLookupError):
            if over and st.state != "T":  # also re-stops one someone else continued
                os.kill(ex.pid, signal.SIGSTOP)
            elif not over and b.stopped:
                os.kill(ex.pid, signal.SIGCONT)
        b.stopped = over

    def _watch_loop(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                targets = [ex for ex in self._execs.values() if ex.active]
            events: list[_Event] = []
            links = procfs.parent_links() if targets else None
            for ex in targets:  # read /proc without the lock: the throttle must keep its beat
                alive = procfs.is_running(ex.pid, ex.start_time)
                rss = sum(procfs.rss(p) for p in procfs.tree(ex.pid, links)) if alive else 0
                with self._lock:
                    if not ex.active:
                        continue
                    if not alive:
                        self._deactivate(ex)
                    else:
                        ex.peak_rss = max(ex.peak_rss, rss)
                        events += self._check_memory(ex, rss)
            for kind, name, data in events:
                try:
                    if self._on_event is not None:
                        self._on_event(kind, name, data)
                except Exception:
                    log.exception("on_event(%s, %s) failed", kind, name)

    def _check_memory(self, ex: _Exec, rss: int) -> list[_Event]:
        limit, name = ex.handle.allotment.memory, ex.handle.name
        events: list[_Event] = []
        if rss >= _PRESSURE_FRACTION * limit and not ex.pressure_sent:
            ex.pressure_sent = True
            events.append(("MemoryPressure", name, {"rss": rss, "memory": limit, "pid": ex.pid}))
        kernel = ex.groups is not None and ex.groups.memory is not None  # then the kernel enforces
        if not kernel and rss >= self._kill_fraction * limit:
            ex.reason = f"memory limit: rss {rss} reached {self._kill_fraction:.0%} of {limit}"
            procfs.signal_group(ex.pid, ex.start_time, signal.SIGKILL, signal.SIGCONT)
            self._deactivate(ex)
            events.append(
                ("MemoryLimit", name, {"rss": rss, "memory": limit, "pid": ex.pid, "reason": ex.reason})
            )
        return events
