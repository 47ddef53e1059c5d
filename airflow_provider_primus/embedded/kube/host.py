"""What a real node needs from this machine, and what it leaves on it unless removed.

A kubelet and containerd are not confined to a work directory: they create cgroups in every
hierarchy, a bridge, mounts (the kubelet bind-mounts its root dir, containerd mounts root file
systems, ``shm`` and network namespaces) and a few files at fixed paths. Everything here is about
the machine, so the node's start (``node.py``) checks first and its teardown can be repeated after a
crash (``primus cluster down`` on a dead supervisor) without knowing what was running.

Only the addresses of the bridge's own range and loopback are ever configured: the bridge gets a
private range that must not overlap any route the machine already has.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from airflow_provider_primus.errors import PrimusError

CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
# Paths the kubelet, containerd and the CNI plugins use whatever they are configured with.
FIXED_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/var/lib/cni"),
    Path("/run/containerd"),
)
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
COMMANDS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "mount", "umount")


class HostError(PrimusError):
    """The machine cannot run the node, or refused a change; the message says what and why."""


def _mountinfo() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount, in mount order."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point = left.split()[4].replace("\\040", " ")
        found.append((point, right.split()[0]))
    return found


def cgroup_version() -> int:
    """2 on a unified hierarchy, 1 otherwise (hybrid machines count as 1: the kubelet uses v1 there)."""
    return 2 if any(p == str(CGROUP_ROOT) and t == "cgroup2" for p, t in _mountinfo()) else 1


def cgroup_hierarchies() -> list[Path]:
    """Every mounted hierarchy under /sys/fs/cgroup (v1 controllers, named ones, the v2 tree)."""
    return [Path(p) for p, t in _mountinfo() if t in ("cgroup", "cgroup2") and p.startswith(str(CGROUP_ROOT))]


def _cgroup_writable(path: Path) -> bool:
    probe = path / f"primus-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run a real node, one line each; empty when it has everything."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root: the kubelet and containerd run as root (run the tests as root)")
    for command in COMMANDS:
        if shutil.which(command) is None:
            missing.append(f"`{command}` on PATH (Debian: apt-get install containerd runc iproute2)")
    for plugin in CNI_PLUGINS:
        if not (CNI_BIN_DIR / plugin).is_file():
            missing.append(
                f"CNI plugin {CNI_BIN_DIR / plugin} (Debian: apt-get install containernetworking-plugins)"
            )
    if cgroup_version() == 2:
        if not _cgroup_writable(CGROUP_ROOT):
            missing.append(f"a writable cgroup v2 tree at {CGROUP_ROOT}")
    else:
        for controller in ("cpu", "memory", "pids"):
            if not _cgroup_writable(CGROUP_ROOT / controller):
                missing.append(f"a writable cgroup v1 `{controller}` hierarchy at {CGROUP_ROOT / controller}")
    return missing


# --- the bridge ----------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise HostError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def bridge_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def check_bridge(name: str, gateway_cidr: str) -> None:
    """Refuse a device name that is taken or a range that overlaps a route the machine already has:
    pods must reach only addresses of this run, and a teardown must delete only what it created."""
    network = ipaddress.ip_interface(gateway_cidr).network
    routes = json.loads(_ip("-j", "route", "show", "table", "all").stdout or "[]")
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("table") == "local":
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_network(dst, strict=False).overlaps(network):
                raise HostError(
                    f"the pod range {network} overlaps the route {dst} via {route.get('dev')}; "
                    "choose another range (--pod-cidr)"
                )
    if bridge_exists(name):
        raise HostError(f"a network device named {name} exists already: is another node running?")


def create_bridge(name: str, gateway_cidr: str) -> None:
    """The pods' bridge with ``gateway_cidr`` (e.g. ``10.88.0.1/16``) on it; call ``check_bridge``
    first (before recording the bridge as ours)."""
    _ip("link", "add", name, "type", "bridge")
    try:
        _ip("addr", "add", gateway_cidr, "dev", name)
        _ip("link", "set", name, "up")
    except HostError:
        delete_bridge(name)
        raise


def add_address(device: str, cidr: str) -> None:
    """One more address on a device of ours (it goes when the device is deleted)."""
    _ip("addr", "add", cidr, "dev", device)


def delete_bridge(name: str) -> None:
    if bridge_exists(name):
        _ip("link", "delete", name, check=False)


# --- mounts, cgroups and fixed paths -------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    return [p for p, _ in _mountinfo() if p == str(root) or p.startswith(prefix)]


def unmount_under(root: Path) -> None:
    """Unmount everything at or below ``root``, deepest (latest) first; a busy one lazily."""
    for point in reversed(mounts_under(root)):
        proc = subprocess.run(["umount", point], capture_output=True, check=False)
        if proc.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def kubepods_cgroups() -> list[Path]:
    return [h / KUBEPODS for h in cgroup_hierarchies() if (h / KUBEPODS).exists()]


def _kill_cgroup_tree(root: Path) -> None:
    for procs in root.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)


def remove_kubepods_cgroups() -> list[str]:
    """Kill what still runs in a ``kubepods`` group, then remove the groups bottom-up; returns the
    groups that could not be removed (a process that did not die yet)."""
    left = []
    for root in kubepods_cgroups():
        _kill_cgroup_tree(root)
        for group in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                group.rmdir()
        try:
            root.rmdir()
        except OSError:
            left.append(str(root))
    return left


def existing_fixed_paths() -> list[str]:
    """Recorded at start: those that existed before are left alone at teardown."""
    return [str(p) for p in FIXED_PATHS if p.exists()]


def remove_fixed_paths(existed_before: list[str], network: str) -> None:
    """Remove what the run created at fixed paths: whole trees it created, and inside trees that
    were there before only its own CNI cache entries and device-plugin socket dir."""
    for path in FIXED_PATHS:
        if str(path) in existed_before:
            continue
        unmount_under(path)
        shutil.rmtree(path, ignore_errors=True)
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        for entry in results.glob(f"{network}-*"):
            entry.unlink(missing_ok=True)
    device_plugins = Path("/var/lib/kubelet/device-plugins")
    if "/var/lib/kubelet" in existed_before and device_plugins.is_dir():
        shutil.rmtree(device_plugins, ignore_errors=True)


def leftovers(state_dir: Path, bridge: str, existed_before: list[str], network: str) -> list[str]:
    """What a node run left behind on the machine; empty after a clean teardown."""
    found = [f"mount {m}" for m in mounts_under(state_dir)]
    found += [f"cgroup {g}" for g in kubepods_cgroups()]
    if bridge_exists(bridge):
        found.append(f"bridge {bridge}")
    found += [f"path {p}" for p in FIXED_PATHS if p.exists() and str(p) not in existed_before]
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        found += [f"CNI cache {p}" for p in results.glob(f"{network}-*")]
    found += [f"process {pid}: {cmd}" for pid, cmd in processes_mentioning(str(state_dir))]
    return found


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text`` (a state dir: ours and nobody else's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append((int(entry.name), cmdline.strip()[:200]))
    return found


def kill_processes_mentioning(text: str) -> None:
    for pid, _ in processes_mentioning(text):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
