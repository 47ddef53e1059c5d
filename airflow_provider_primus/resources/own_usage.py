"""An executor's own CPU and memory use, measured from inside, pushed with its heartbeats.

A master sees its executors' processes only on the local backend; a pod's CPU and memory are the
kubelet's to know, and a node's metrics pipeline is neither always there nor fast enough for the
autoscaler. So every executor reports its own figures: from its own control group where it has one
(a container always does; the local backend says so with ``PRIMUS_OWN_CGROUP``), which counts every
thread and child the way the limit does, else from ``/proc/self``.

Inside a container the cgroup file system is mounted with the container's group as each hierarchy's
root (runc's v1 bind mounts, or a v2 cgroup namespace); on a host the group is the path
``/proc/self/cgroup`` names under the mount. Both are tried, in that order of specificity.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

__all__ = ["OWN_CGROUP_ENV", "own_usage"]

OWN_CGROUP_ENV = "PRIMUS_OWN_CGROUP"
_FS = Path("/sys/fs/cgroup")


def _groups() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    except OSError:
        pass
    return out


def _dir(mount: Path, own: str | None) -> Path | None:
    """Our group in the hierarchy mounted at ``mount``: under the path we are in, or its root (a
    container's view)."""
    if own is not None and own != "/" and (mount / own.lstrip("/")).is_dir():
        return mount / own.lstrip("/")
    return mount if mount.is_dir() else None


def _read_int(path: Path) -> int:
    return int(path.read_text().split()[0])


def _from_cgroup() -> dict[str, Any] | None:
    groups = _groups()
    if "" in groups and (v2 := _dir(_FS, groups[""])) is not None and (v2 / "cpu.stat").exists():
        try:
            stat = dict(line.split() for line in (v2 / "cpu.stat").read_text().splitlines())
            return {
                "cpu_s": int(stat["usage_usec"]) / 1e6,
                "rss": _read_int(v2 / "memory.current"),
                "source": "cgroup-v2",
            }
        except (OSError, KeyError, ValueError):
            return None
    cpu = next((_dir(_FS / m, groups.get("cpuacct")) for m in ("cpuacct", "cpu,cpuacct")), None)
    memory = _dir(_FS / "memory", groups.get("memory"))
    if cpu is None or memory is None:
        return None
    try:
        return {
            "cpu_s": _read_int(cpu / "cpuacct.usage") / 1e9,
            "rss": _rss_v1(memory),
            "source": "cgroup-v1",
        }
    except (OSError, ValueError):
        return None


def _rss_v1(memory: Path) -> int:
    """Memory the limit is charged for, less the page cache the kernel would reclaim first (what
    ``kubectl top`` calls the working set)."""
    usage = _read_int(memory / "memory.usage_in_bytes")
    stat = dict(line.split() for line in (memory / "memory.stat").read_text().splitlines())
    return max(0, usage - int(stat.get("total_inactive_file", stat.get("inactive_file", 0))))


def _from_proc() -> dict[str, Any]:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    cpu = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    return {"cpu_s": cpu, "rss": rss, "source": "proc"}


def own_usage() -> dict[str, Any]:
    """``{cpu_s, rss, source}``: cumulative CPU seconds and resident memory now, and where from."""
    if os.environ.get(OWN_CGROUP_ENV) == "1":
        found = _from_cgroup()
        if found is not None:
            return {**found, "cpu_s": round(found["cpu_s"], 3)}
    found = _from_proc()
    return {**found, "cpu_s": round(found["cpu_s"], 3)}
