"""Control groups for the local backend: the kernel enforces an executor's CPU quota and memory limit.

Where this process may create cgroups (root on a cgroup v1 machine, or a delegated cgroup v2
subtree), each executor gets its own group before its first instruction runs (the exec wrapper joins
it) and the allotment is written to the group's files; a resize rewrites them in place, which is
what a kubelet does for a pod. Nothing is left to a sampling loop outside the process: the quota
holds at the scheduler's own granularity, and a memory limit is the kernel's, not a watchdog's.

- **v1**: one group per executor under a per-job directory beside this process's own group in each
  hierarchy (``cpu``: ``cpu.cfs_quota_us`` against ``cpu.cfs_period_us``; ``memory``:
  ``memory.limit_in_bytes``; OOM kills counted in ``memory.oom_control``).
- **v2**: groups under the delegated cgroup (``memory.max``, ``cpu.max`` where the cpu controller can
  be enabled; OOM kills in ``memory.events``; ``memory.oom.group`` so a kill takes the whole executor).

Where neither is writable the backend falls back to affinity plus a SIGSTOP/SIGCONT duty cycle and an
RSS watchdog; ``enforcement`` in an executor's ``ref`` (and ``primus status``) says which is in force.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

CGROUP_FS = Path("/sys/fs/cgroup")
_MASTER_LEAF = "primus-master"
PERIOD_US = 100_000  # the kernel's default CFS period: a quota of n periods is n cores
Setting = Literal["auto", "v1", "v2", "off"]

__all__ = ["CGROUP_FS", "Groups", "Hierarchy", "delegated_cgroup"]


@dataclass(frozen=True)
class Groups:
    """One executor's groups: where its CPU quota and its memory limit are written (None: not
    enforced by a cgroup). The executor joins every one of ``dirs()``."""

    version: int
    cpu: Path | None
    memory: Path | None

    def dirs(self) -> list[Path]:
        return list(dict.fromkeys(p for p in (self.cpu, self.memory) if p is not None))

    def enforcement(self) -> dict[str, str]:
        name = f"cgroup-v{self.version}"
        return {"cpu": name if self.cpu else "duty-cycle", "memory": name if self.memory else "watchdog"}

    def to_ref(self) -> dict[str, Any]:
        return {
            "cgroup_version": self.version,
            "cgroup_cpu": str(self.cpu) if self.cpu else None,
            "cgroup_memory": str(self.memory) if self.memory else None,
            "enforcement": self.enforcement(),
        }

    @classmethod
    def from_ref(cls, ref: dict[str, Any]) -> Groups | None:
        """The groups a handle names (a restarted master adopts them); ``cgroup`` is the layout of
        masters before v1 support (one v2 group holding the memory limit)."""
        if ref.get("cgroup_version"):
            cpu, memory = ref.get("cgroup_cpu"), ref.get("cgroup_memory")
            return cls(
                int(ref["cgroup_version"]), Path(cpu) if cpu else None, Path(memory) if memory else None
            )
        if ref.get("cgroup"):
            return cls(2, None, Path(ref["cgroup"]))
        return None


def _own_paths() -> dict[str, str]:
    """This process's group per controller (``/proc/self/cgroup``); "" names the v2 hierarchy."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                out[controller] = path
    return out


def _v1_base(controller: str, own: dict[str, str]) -> Path | None:
    """Where this process's v1 group for ``controller`` is, if that hierarchy is mounted and ours to
    write (a new directory beside our own group can be made)."""
    if controller not in own:
        return None
    mount = CGROUP_FS / controller
    if not (mount / "cgroup.procs").exists() or (mount / "cgroup.subtree_control").exists():
        return None  # not a v1 hierarchy of that controller
    base = mount / own[controller].lstrip("/")
    return base if os.access(base, os.W_OK) else None


def delegated_cgroup() -> Path | None:
    """Our own cgroup v2 directory when we may set limits below it, else None."""
    own = _own_paths().get("")
    if own is None:
        return None
    base = CGROUP_FS / own.lstrip("/")
    if base.name == _MASTER_LEAF:  # a master we moved aside earlier: its parent is the delegated one
        base = base.parent
    writable = all(os.access(base / f, os.W_OK) for f in ("memory.max", "cgroup.subtree_control"))
    return base if writable else None


def _enable_controllers(base: Path) -> None:
    control = base / "cgroup.subtree_control"
    enabled = control.read_text().split()
    if "memory" not in enabled:
        try:
            control.write_text("+memory")
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            # cgroup v2's "no internal processes" rule: a cgroup that holds processes cannot hand
            # controllers to children, so the processes here (the master) move into a leaf first.
            leaf = base / _MASTER_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in (base / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    (leaf / "cgroup.procs").write_text(pid)
            control.write_text("+memory")
    available = (
        (base / "cgroup.controllers").read_text().split() if (base / "cgroup.controllers").exists() else []
    )
    if "cpu" in available and "cpu" not in enabled:
        with contextlib.suppress(OSError):  # not ours to enable: CPU stays with the duty cycle
            control.write_text("+cpu")


class Hierarchy:
    """The job's groups in whichever cgroup version this process may write."""

    def __init__(self, version: int, cpu_base: Path | None, memory_base: Path | None) -> None:
        self.version = version
        self.cpu_base, self.memory_base = cpu_base, memory_base

    @classmethod
    def detect(cls, job: str, setting: Setting = "auto") -> Hierarchy | None:
        """The job's hierarchy (``job``: a key unique to the job, such as its work directory), or
        None where no cgroup is writable or ``setting`` is ``off``."""
        if setting == "off":
            return None
        tag = "primus-" + hashlib.sha256(job.encode()).hexdigest()[:12]
        if setting in ("auto", "v2") and (base := delegated_cgroup()) is not None:
            _enable_controllers(base)
            return cls(2, base, base)
        if setting in ("auto", "v1"):
            own = _own_paths()
            cpu, memory = _v1_base("cpu", own), _v1_base("memory", own)
            if cpu is not None or memory is not None:
                made = [cls._job_dir(b, tag) for b in (cpu, memory)]
                if any(made):
                    return cls(1, made[0], made[1])
        return None

    @staticmethod
    def _job_dir(base: Path | None, tag: str) -> Path | None:
        if base is None:
            return None
        try:
            (base / tag).mkdir(exist_ok=True)
        except OSError as e:
            log.info("cgroup %s not writable (%s): falling back", base, e)
            return None
        return base / tag

    @property
    def mechanism(self) -> str:
        return f"cgroup-v{self.version}"

    def create(self, name: str, cpu: float, memory: int) -> Groups:
        cpu_dir = self.cpu_base / f"primus-{name}" if self.cpu_base else None
        memory_dir = self.memory_base / f"primus-{name}" if self.memory_base else None
        for d in {cpu_dir, memory_dir} - {None}:
            assert d is not None
            d.mkdir(exist_ok=True)
        if self.version == 2 and memory_dir is not None:
            # An OOM kill takes the whole executor, never one worker of it that leaves the rest confused.
            with contextlib.suppress(OSError):
                (memory_dir / "memory.oom.group").write_text("1")
            with contextlib.suppress(OSError):  # swap would let the executor exceed its limit unnoticed
                (memory_dir / "memory.swap.max").write_text("0")
        if self.version == 2 and cpu_dir is not None and not (cpu_dir / "cpu.max").exists():
            cpu_dir = None  # the cpu controller was not delegated
        groups = Groups(self.version, cpu_dir, memory_dir)
        self.resize(groups, cpu, memory)
        return groups

    @staticmethod
    def resize(groups: Groups, cpu: float, memory: int) -> None:
        """Write the allotment in place; the kernel applies it to the running processes at once."""
        quota = max(1000, round(cpu * PERIOD_US))
        if groups.cpu is not None:
            if groups.version == 1:
                (groups.cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (groups.cpu / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (groups.cpu / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        if groups.memory is not None:
            name = "memory.limit_in_bytes" if groups.version == 1 else "memory.max"
            try:
                (groups.memory / name).write_text(str(memory))
            except OSError as e:  # v1 refuses a limit below what the group cannot give back
                raise OSError(
                    e.errno, f"cannot set the memory limit of {groups.memory} to {memory}: {e}"
                ) from e

    @staticmethod
    def oom_kills(groups: Groups) -> int:
        if groups.memory is None:
            return 0
        name = "memory.oom_control" if groups.version == 1 else "memory.events"
        try:
            for line in (groups.memory / name).read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    @staticmethod
    def remove(groups: Groups) -> None:
        for d in groups.dirs():
            _remove_when_empty(d)

    def close(self) -> None:
        """Remove the job's directories once no executor is left in them: the groups of executors
        that ended (one the kernel was still tearing down when it was retired included), then the
        job's own (v1 only: v2 groups sit directly under the delegated one)."""
        if self.version != 1:
            return
        for base in (self.cpu_base, self.memory_base):
            if base is None or not base.is_dir():
                continue
            for child in base.iterdir():
                if child.is_dir():
                    _remove_when_empty(child)
            _remove_when_empty(base)


def _remove_when_empty(group: Path, wait_s: float = 1.0) -> None:
    """rmdir a group holding no process; a process still exiting is waited for a moment (the
    kernel refuses with EBUSY until it is gone). A group in use, or already gone, is left alone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline or _in_use(group):
                return
        time.sleep(0.05)


def _in_use(group: Path) -> bool:
    """Processes in it, or groups below it: nothing to wait for, it stays."""
    try:
        if (group / "cgroup.procs").read_text().split():
            return True
        return any(child.is_dir() for child in group.iterdir())
    except OSError:
        return False
