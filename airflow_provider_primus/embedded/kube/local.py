"""One machine, one Kubernetes: the embedded control plane plus a real node, as a unit.

What ``primus cluster up|status|down`` runs (the way people use kind or minikube) and what the
real-node tests use, so both exercise the same start and teardown. ``LocalCluster`` starts both in
the calling process (its children die with it); ``start_detached`` runs it in a supervisor process of
its own (``primus cluster up --foreground`` in a new session), which tears everything down on
SIGTERM. ``stop_detached`` signals that supervisor and then cleans the machine from the node's state
file whatever happened to the supervisor, so a ``kill -9`` still ends in a clean machine.

The state file ``cluster.json`` in the work dir is written once everything is ready; it carries the
supervisor's pid, the kubeconfig path and the start-up timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

from airflow_provider_primus.embedded.kube import host
from airflow_provider_primus.embedded.kube.access import ADMIN, ClusterState, KubeClusterError
from airflow_provider_primus.embedded.kube.binaries import ensure_binaries, ensure_node_binaries
from airflow_provider_primus.embedded.kube.cluster import KubeCluster
from airflow_provider_primus.embedded.kube.node import (
    LAST_STATE_FILE,
    NodeConfig,
    NodeState,
    RealNode,
    cleanup,
)
from airflow_provider_primus.process import PRIMUS_MODULE, pid_alive, stop_process_group

STATE_FILE = "cluster.json"
SUPERVISOR_LOG = "supervisor.log"


@dataclass(frozen=True)
class LocalClusterState:
    pid: int  # the process that owns the cluster (the supervisor when detached)
    server: str
    kubeconfig: str
    node: str
    node_ip: str
    pod_cidr: str
    cgroup_version: int
    images: dict[str, str]
    workdir: str
    startup_seconds: float
    component_seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class LocalCluster:
    """Start and stop the control plane and one real node under ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        cache_dir: Path | None = None,
        node_config: NodeConfig | None = None,
        users: dict[str, list[str]] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.cache_dir = cache_dir
        self.node_config = node_config or NodeConfig()
        self.users = users
        self.control_plane: KubeCluster | None = None
        self.node: RealNode | None = None
        self.state: LocalClusterState | None = None

    @property
    def node_dir(self) -> Path:
        return self.workdir / "node"

    def start(self, timeout_s: float = 180.0) -> LocalClusterState:
        """Build what is missing (minutes on a cold machine; not counted in ``timeout_s``), then
        start the control plane and the node and return once the node is Ready."""
        bins = ensure_binaries(self.cache_dir)
        node_bins = ensure_node_binaries(self.cache_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / STATE_FILE).unlink(missing_ok=True)
        started = time.monotonic()
        # No kube-proxy here, so nothing routes a Service's cluster IP from the host: the API server
        # dials a webhook Service's endpoints (pod IPs on the node's bridge) itself, as it does its
        # aggregated APIs. The conversion webhook runs in pods like that.
        self.control_plane = KubeCluster(
            bins,
            self.workdir / "control-plane",
            users=self.users,
            extra_apiserver_args=["--enable-aggregator-routing=true"],
        )
        try:
            cp = self.control_plane.start(timeout_s=timeout_s)
            self.node = RealNode(node_bins, cp, self.node_dir, self.node_config, self.cache_dir)
            node = self.node.start(timeout_s=max(30.0, timeout_s - (time.monotonic() - started)))
        except BaseException:
            self.stop()
            raise
        self.state = LocalClusterState(
            pid=os.getpid(),
            server=cp.server,
            kubeconfig=str(cp.kubeconfig(ADMIN)),
            node=node.name,
            node_ip=node.node_ip,
            pod_cidr=node.pod_cidr,
            cgroup_version=node.cgroup_version,
            images=dict(node.images),
            workdir=str(self.workdir),
            startup_seconds=round(time.monotonic() - started, 2),
            component_seconds={
                **{f"control-plane/{k}": v for k, v in cp.component_seconds.items()},
                **{f"node/{k}": v for k, v in node.component_seconds.items()},
            },
        )
        (self.workdir / STATE_FILE).write_text(self.state.to_json())
        return self.state

    @property
    def cluster_state(self) -> ClusterState:
        if self.control_plane is None or self.control_plane.state is None:
            raise KubeClusterError("cluster not started")
        return self.control_plane.state

    def stop(self) -> None:
        """The node first (its pods go through the kubelet, which needs the API server)."""
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / STATE_FILE).unlink()
        if self.node is not None:
            self.node.stop()
            self.node = None
        if self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None
        self.state = None

    def leftovers(self) -> list[str]:
        """What the last run left on the machine (empty after a clean stop)."""
        state = NodeState.read(self.node_dir) or NodeState.read(self.node_dir, LAST_STATE_FILE)
        if state is None:
            return []
        return host.leftovers(self.node_dir, state.bridge, state.existed_before, state.network)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --- detached: a supervisor process owns the cluster ---------------------------------------------


def read_state(workdir: Path) -> LocalClusterState | None:
    try:
        return LocalClusterState(**json.loads((workdir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _is_supervisor(pid: int) -> bool:
    """A live ``primus cluster`` process (a recycled pid is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return pid_alive(pid) and b"cluster" in cmdline and PRIMUS_MODULE.encode() in cmdline


def running_state(workdir: Path) -> LocalClusterState | None:
    state = read_state(workdir)
    return state if state is not None and _is_supervisor(state.pid) else None


def start_detached(
    workdir: Path, *, timeout_s: float = 1800.0, extra_args: list[str] | None = None
) -> LocalClusterState:
    """Start a supervisor (``primus cluster up --foreground``) in its own session and wait until it
    reports the cluster ready; ``timeout_s`` covers builds on a cold machine."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / STATE_FILE).unlink(missing_ok=True)
    log_path = workdir / SUPERVISOR_LOG
    command = [
        sys.executable,
        "-m",
        PRIMUS_MODULE,
        "cluster",
        "up",
        "--foreground",
        "--workdir",
        str(workdir),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*command, *(extra_args or [])],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while True:
        state = read_state(workdir)
        if state is not None and state.pid == proc.pid:
            return state
        if proc.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
            raise KubeClusterError(f"`primus cluster up` exited with {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            stop_process_group(proc.pid, child=proc, grace_s=120.0)
            raise KubeClusterError(f"the cluster was not ready within {timeout_s:.0f}s; see {log_path}")
        time.sleep(0.2)  # another process's progress: nothing to block on


def stop_detached(workdir: Path, timeout_s: float = 180.0) -> tuple[str, list[str]]:
    """Stop the supervisor (it tears down in order), then clean the machine from the node's state
    file in case it could not. Returns what happened (``stopped``; ``cleaned up`` after a dead
    supervisor; ``not running``) and what remains on the machine (nothing, normally)."""
    state = read_state(workdir)
    running = state is not None and _is_supervisor(state.pid)
    leftover_node = NodeState.read(workdir / "node") is not None
    if state is not None and running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pid_alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # not our child: poll its /proc entry
        if pid_alive(state.pid):
            stop_process_group(state.pid, grace_s=0)
    host.kill_processes_mentioning(str(workdir / "control-plane"))
    left = cleanup(workdir / "node")
    with contextlib.suppress(FileNotFoundError):
        (workdir / STATE_FILE).unlink()
    return ("stopped" if running else "cleaned up" if leftover_node else "not running"), left
