"""Reading /proc and writing cgroup v2 files for the local backend.

Every reader returns ``None`` (or zero) for a process that vanished between two reads: executors
end at any moment, and a watchdog that raised on a race would stop guarding the others.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
CGROUP_FS = Path("/sys/fs/cgroup")
_MASTER_LEAF = "primus-master"


@dataclass(frozen=True)
class Stat:
    state: str
    ppid: int
    cpu_s: float  # utime + stime of all threads
    children_cpu_s: float  # cutime + cstime: children it has reaped
    start_time: int  # field 22, clock ticks since boot: with the pid, the process's identity


def stat(pid: int) -> Stat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; everything after the last ")" is safe.
    f = raw.rsplit(b")", 1)[1].split()
    return Stat(
        state=f[0].decode(),
        ppid=int(f[1]),
        cpu_s=(int(f[11]) + int(f[12])) / CLK_TCK,
        children_cpu_s=(int(f[13]) + int(f[14])) / CLK_TCK,
        start_time=int(f[19]),
    )


def is_running(pid: int, start_time: int) -> bool:
    """The same process (not a recycled pid) and not a zombie."""
    st = stat(pid)
    return st is not None and st.start_time == start_time and st.state not in ("Z", "X")


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0  # a kernel thread or a zombie has no VmRSS


def io(pid: int) -> tuple[int, int]:
    """Bytes read and written; storage bytes when allowed, else the syscall totals (rchar/wchar)."""
    try:
        fields = dict(line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:  # PermissionError for another user's process, or gone
        return 0, 0
    if "read_bytes" in fields:
        return int(fields["read_bytes"]), int(fields["write_bytes"])
    return int(fields.get("rchar", 0)), int(fields.get("wchar", 0))


def tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


# Without CONFIG_PROC_CHILDREN (as on this project's CI kernel) only a scan of /proc finds children.
_CHILDREN_FILES = Path(f"/proc/self/task/{os.getpid()}/children").exists()

Links = Mapping[int, list[int]]


def parent_links() -> Links | None:
    """Every process's children from one scan of /proc, to share among all the trees of one pass;
    None where the kernel lists children itself, which is cheaper per tree than any scan."""
    if _CHILDREN_FILES:
        return None
    links: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (st := stat(int(entry.name))) is not None:
            links.setdefault(st.ppid, []).append(int(entry.name))
    return links


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for tid in tasks(pid):
        with contextlib.suppress(OSError, ValueError):  # the thread ended meanwhile
            kids += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return kids


def tree(pid: int, links: Links | None = None) -> list[int]:
    """The process and all its descendants, the process first."""
    if links is None:
        links = parent_links()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += links.get(p, []) if links is not None else _children(p)
    return out


def usage(pid: int, links: Links | None = None) -> tuple[float, int, int, int]:
    """CPU seconds, RSS, bytes read and written of the process tree: an executor's workers count."""
    cpu, mem, rd, wr = 0.0, 0, 0, 0
    for p in tree(pid, links):
        if (st := stat(p)) is not None:
            r, w = io(p)
            cpu, mem, rd, wr = cpu + st.cpu_s + st.children_cpu_s, mem + rss(p), rd + r, wr + w
    return cpu, mem, rd, wr


def set_affinity(pid: int, cores: Sequence[int]) -> None:
    """Affinity is per thread and inherited at creation: set it on every thread of every process of
    the tree, and list the threads again until no new one appeared meanwhile."""
    for proc in tree(pid):
        done: set[int] = set()
        while new := set(tasks(proc)) - done:
            for tid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.sched_setaffinity(tid, cores)
            done |= new


def signal_group(pid: int, start_time: int, *sigs: int) -> None:
    """Signal the process group led by ``pid`` unless that pid now names another process. (While any
    member of the group lives its id is not reused, so a vanished leader still means our group.)"""
    st = stat(pid)
    if st is not None and st.start_time != start_time:
        return
    for sig in sigs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def wait_ended(pid: int, start_time: int, timeout_s: float) -> bool:
    """Poll until the process ended, for one that is not our child (nothing to wait() on)."""
    deadline = time.monotonic() + timeout_s
    while is_running(pid, start_time):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
