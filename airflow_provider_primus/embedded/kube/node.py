"""A real Kubernetes node beside the embedded control plane: kubelet, containerd + runc, CNI bridge,
and kube-controller-manager.

The kwok nodes of ``cluster.py`` play a kubelet's part; this one is a kubelet, so pods run as real
containers whose cgroup limits the kernel enforces and an in-place resize reaches. Its settings are
the ones verified on this kind of machine (each was the fix for a real error, see
/work/shared/recipes/real-node.md and the comments at each):

* cgroupfs driver; ``failCgroupV1: false`` only where the machine mounts cgroup v1 (the kubelet
  refuses v1 otherwise), nothing special on v2;
* the node's address is the pods' bridge gateway (a private range this run creates; the kubelet
  refuses a loopback node IP); the API server reaches the kubelet at that InternalIP, never by name;
* ``resolvConf`` is a file of our own: nothing in a pod or in the kubelet resolves names through the
  machine's resolver;
* nothing can be pulled: the sandbox image and test images are built locally (``images.py``).

kubelet and kube-controller-manager use the cluster's admin credentials: a single-machine cluster
whose components are all this process's children, not a multi-tenant one (no node authorizer).

One node per machine: the kubelet uses fixed paths (``/var/lib/kubelet/device-plugins``) and the
``kubepods`` cgroups, so a machine-wide lock guards ``start``. ``stop`` — also ``cleanup`` on a
state dir whose owner died — removes everything the recipe lists as left behind otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from airflow_provider_primus.embedded.kube import host
from airflow_provider_primus.embedded.kube.access import ADMIN, LOOPBACK, SERVICE_CIDR, ClusterState
from airflow_provider_primus.embedded.kube.binaries import NodeBinaries
from airflow_provider_primus.embedded.kube.cluster import _get, _unverified_tls, free_port
from airflow_provider_primus.embedded.kube.images import CGROUP_PROBE, PAUSE, ensure_image
from airflow_provider_primus.embedded.kube.relay import TcpRelay
from airflow_provider_primus.embedded.kube.runtime import Containerd
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.process import stop_process_group, tied_to_launcher

if TYPE_CHECKING:
    from airflow_provider_primus.kubernetes.client import KubeApi

NODE_LOCK = Path("/run/primus-realnode.lock")
STATE_FILE = "node.json"  # present from start until a teardown left the machine clean
LAST_STATE_FILE = "node-last.json"
# The `kubernetes` Service's cluster IP: pods reach the API server there (``relay.py``).
API_SERVICE_IP = str(ipaddress.ip_network(SERVICE_CIDR)[1])
API_SERVICE_PORT = 443


class NodeUnavailableError(PrimusError):
    """This machine cannot run a real node; ``missing`` says exactly what it lacks."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__("a real Kubernetes node cannot run here; missing: " + "; ".join(missing))
        self.missing = missing


class NodeError(PrimusError):
    """A component failed or a wait ran out; the message carries the relevant log tail."""


@dataclass(frozen=True)
class NodeConfig:
    name: str = "primus-node"
    bridge: str = "primus0"
    gateway_cidr: str = "10.88.0.1/16"  # the bridge's address and the pods' range
    network: str = "primus-pods"  # the CNI network's name (its cache entries carry it)


@dataclass
class NodeState:
    """What a teardown needs, written before the machine is changed (a crash leaves it behind)."""

    name: str
    node_ip: str
    pod_cidr: str
    bridge: str
    network: str
    state_dir: str
    cgroup_version: int
    existed_before: list[str]
    images: dict[str, str] = field(default_factory=dict)
    kubelet_port: int = 0
    startup_seconds: float = 0.0
    component_seconds: dict[str, float] = field(default_factory=dict)

    def write(self) -> None:
        Path(self.state_dir, STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def read(cls, state_dir: Path, name: str = STATE_FILE) -> NodeState | None:
        try:
            return cls(**json.loads((state_dir / name).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def kubelet_config(state: NodeState, socket: Path, healthz_port: int) -> dict[str, Any]:
    sd = Path(state.state_dir)
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": state.node_ip,
        "port": state.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": healthz_port,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},  # a test node: the API server is its only client
        "hairpinMode": "none",
        "resolvConf": str(sd / "resolv.conf"),
        "podLogsDir": str(sd / "pod-logs"),
        "volumePluginDir": str(sd / "volume-plugins"),
        # A shared development machine's disk is rarely 85% free: evict only when it is really full.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
            "imagefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,  # locally built images cannot be pulled back
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }
    if state.cgroup_version == 1:
        config["failCgroupV1"] = False  # else: "kubelet is configured to not run on a host using cgroup v1"
    return config


def cni_conflist(state: NodeState) -> dict[str, Any]:
    """A bridge on the run's own range. No masquerading and one route: a pod reaches only that range
    (and this machine on it) and the API server's Service IP on this machine, nothing beyond.
    ``isGateway`` stays off because we put the gateway address on the bridge ourselves, and it would
    also switch on the machine's IP forwarding."""
    network = ipaddress.ip_interface(f"{state.node_ip}/{state.pod_cidr.split('/')[1]}").network
    return {
        "cniVersion": "0.4.0",
        "name": state.network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": state.bridge,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": str(network), "rangeStart": str(network[2]), "gateway": state.node_ip}]
                    ],
                    # The API server's Service IP only, through the gateway (``relay.py``).
                    "routes": [{"dst": f"{API_SERVICE_IP}/32", "gw": state.node_ip}],
                    "dataDir": str(Path(state.state_dir) / "cni-ipam"),
                },
            }
        ],
    }


def _await(what: str, ready: Callable[[], bool], deadline: float, tail: Callable[[], str],
           proc: subprocess.Popen[bytes] | None = None) -> None:  # fmt: skip
    delay = 0.02
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise NodeError(f"{what} exited with {proc.returncode}:\n{tail()}")
        if time.monotonic() > deadline:
            raise NodeError(f"{what}: not ready before the deadline:\n{tail()}")
        time.sleep(delay)  # another process's state: nothing to block on
        delay = min(delay * 1.5, 0.25)


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class RealNode:
    """Start and stop one real node joined to a running control plane."""

    def __init__(
        self,
        binaries: NodeBinaries,
        cluster: ClusterState,
        state_dir: Path,
        config: NodeConfig | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.binaries = binaries
        self.cluster = cluster
        self.state_dir = Path(state_dir)
        self.config = config or NodeConfig()
        self.cache_dir = cache_dir
        self.containerd = Containerd(self.state_dir)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.state: NodeState | None = None
        self._lock: IO[str] | None = None
        self._kube: KubeApi | None = None
        self.relay: TcpRelay | None = None

    def start(self, timeout_s: float = 120.0) -> NodeState:
        missing = host.missing_prerequisites()
        if missing:
            raise NodeUnavailableError(missing)
        started = time.monotonic()
        deadline = started + timeout_s
        pause, probe = ensure_image(PAUSE, self.cache_dir), ensure_image(CGROUP_PROBE, self.cache_dir)
        self._take_lock()
        try:
            if NodeState.read(self.state_dir) is not None:  # an earlier run here ended without teardown
                cleanup(self.state_dir)
            host.check_bridge(self.config.bridge, self.config.gateway_cidr)
        except BaseException:
            self._release_lock()
            raise
        self.state_dir.mkdir(parents=True, exist_ok=True)
        gateway = ipaddress.ip_interface(self.config.gateway_cidr)
        state = self.state = NodeState(
            name=self.config.name,
            node_ip=str(gateway.ip),
            pod_cidr=str(gateway.network),
            bridge=self.config.bridge,
            network=self.config.network,
            state_dir=str(self.state_dir),
            cgroup_version=host.cgroup_version(),
            existed_before=host.existing_fixed_paths(),
            images={PAUSE: pause.name, CGROUP_PROBE: probe.name},
            kubelet_port=free_port(),
        )
        state.write()
        timings: dict[str, float] = {}
        try:
            host.create_bridge(state.bridge, self.config.gateway_cidr)
            self._start_api_relay(state)
            cni_dir = self.state_dir / "cni-conf"
            cni_dir.mkdir(exist_ok=True)
            (cni_dir / "10-primus.conflist").write_text(json.dumps(cni_conflist(state), indent=2))
            self.containerd.start(pause.name, cni_dir, timeout_s=max(1.0, deadline - time.monotonic()))
            for image in (pause, probe):
                self.containerd.import_image(image.tarball)
            timings["containerd"] = time.monotonic() - started
            self._start_kubelet(state, deadline)
            timings["kubelet"] = time.monotonic() - started
            self._start_controller_manager(deadline)
            timings["kube-controller-manager"] = time.monotonic() - started
            _await(f"node {state.name} Ready", self._node_ready, deadline, lambda: self.log_tail("kubelet"),
                   self.processes["kubelet"])  # fmt: skip
            timings["node-ready"] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        state.startup_seconds = round(time.monotonic() - started, 2)
        state.component_seconds = {k: round(v, 2) for k, v in timings.items()}
        state.write()
        return state

    def _start_api_relay(self, state: NodeState) -> None:
        """The `kubernetes` Service for pods: its IP on the bridge (it goes with the bridge), the
        API server behind it (``relay.py``)."""
        host.add_address(state.bridge, f"{API_SERVICE_IP}/32")
        api_port = int(self.cluster.server.rsplit(":", 1)[1].rstrip("/"))
        self.relay = TcpRelay((API_SERVICE_IP, API_SERVICE_PORT), (LOOPBACK, api_port)).start()

    def _take_lock(self) -> None:
        lock = open(NODE_LOCK, "a+")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise NodeError(f"another real node runs on this machine (lock {NODE_LOCK} is held)") from None
        self._lock = lock

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with open(self.log_file(name), "ab") as log:
            proc = subprocess.Popen(
                tied_to_launcher(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,
            )
        self.processes[name] = proc
        return proc

    def _start_kubelet(self, state: NodeState, deadline: float) -> None:
        sd = self.state_dir
        (sd / "resolv.conf").write_text("# pods resolve no names through this machine's resolver\n")
        healthz = free_port()
        config = sd / "kubelet-config.yaml"
        config.write_text(
            yaml.safe_dump(kubelet_config(state, self.containerd.socket, healthz), sort_keys=False)
        )
        proc = self._spawn(
            "kubelet",
            [
                str(self.binaries.kubelet),
                f"--config={config}",
                f"--kubeconfig={self.cluster.kubeconfig(ADMIN)}",
                f"--root-dir={sd / 'kubelet'}",
                f"--cert-dir={sd / 'kubelet-pki'}",
                f"--hostname-override={state.name}",
                f"--node-ip={state.node_ip}",
            ],
        )
        _await("kubelet", lambda: _get(healthz, "/healthz")[0] == 200, deadline,
               lambda: self.log_tail("kubelet"), proc)  # fmt: skip

    def _start_controller_manager(self, deadline: float) -> None:
        kubeconfig = self.cluster.kubeconfig(ADMIN)
        pki = Path(self.cluster.workdir) / "pki"
        port = free_port()
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--authentication-skip-lookup=true",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={self.state_dir / 'kcm-certs'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.cluster.ca_file}",
                "--use-service-account-credentials=false",
            ],
        )
        tls = _unverified_tls()
        _await("kube-controller-manager", lambda: _get(port, "/healthz", tls=tls)[0] == 200, deadline,
               lambda: self.log_tail("kube-controller-manager"), proc)  # fmt: skip

    def _api(self) -> KubeApi:
        from airflow_provider_primus.kubernetes.client import KubeApi, RetryPolicy

        if self._kube is None:
            self._kube = KubeApi(self.cluster.api_client(), timeout_s=5.0, retry=RetryPolicy(attempts=2))
        return self._kube

    def _node_ready(self) -> bool:
        from airflow_provider_primus.kubernetes.client import KubeError

        assert self.state is not None
        try:
            node = self._api().get(f"/api/v1/nodes/{self.state.name}")
        except KubeError:
            return False
        conditions = node.get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def log_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        return _tail(self.log_file(name), lines)

    def _delete_pods(self, timeout_s: float) -> None:
        """Pods go through the kubelet first, so their sandboxes' networks are torn down by CNI."""
        from airflow_provider_primus.kubernetes.client import KubeError

        if self.state is None or "kubelet" not in self.processes:
            return
        api = self._api()
        selector = f"spec.nodeName={self.state.name}"
        with contextlib.suppress(KubeError, OSError):
            for pod in api.get("/api/v1/pods", fieldSelector=selector).get("items", []):
                meta = pod["metadata"]
                with contextlib.suppress(KubeError):
                    api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                               {"gracePeriodSeconds": 1})  # fmt: skip
            with contextlib.suppress(NodeError):
                _await("pods deleted", lambda: not api.get("/api/v1/pods", fieldSelector=selector)["items"],
                       time.monotonic() + timeout_s, lambda: self.log_tail("kubelet"))  # fmt: skip

    def stop(self, timeout_s: float = 60.0) -> None:
        """Pods first (through the kubelet), then the components, then the machine's leftovers.
        Safe to call twice and after a failed start."""
        kcm = self.processes.pop("kube-controller-manager", None)
        if kcm is not None:  # first, or it recreates the pods of ReplicaSets we delete
            stop_process_group(kcm.pid, child=kcm, grace_s=10.0)
        self._delete_pods(timeout_s)
        kubelet = self.processes.pop("kubelet", None)
        if kubelet is not None:
            stop_process_group(kubelet.pid, child=kubelet, grace_s=15.0)
        proc = self.containerd.process
        if proc is not None and proc.poll() is None:
            self.containerd.remove_all_containers()
        if proc is not None:
            stop_process_group(proc.pid, child=proc, grace_s=15.0)
            self.containerd.process = None
        if self.relay is not None:
            self.relay.stop()
            self.relay = None
        if self.state is not None:
            cleanup(self.state_dir)
        if self._kube is not None:
            self._kube.client.close()
            self._kube = None
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def cleanup(state_dir: Path, timeout_s: float = 15.0) -> list[str]:
    """Remove what a node run left on the machine (its processes first); returns what remains.
    Works from the state file alone, so it also cleans up after a killed owner."""
    state = NodeState.read(state_dir)
    if state is None:
        return []
    host.kill_processes_mentioning(str(state_dir))
    host.unmount_under(state_dir)
    host.delete_bridge(state.bridge)
    deadline = time.monotonic() + timeout_s
    # A killed container's processes take a moment to leave their cgroups.
    while host.remove_kubepods_cgroups() and time.monotonic() < deadline:
        time.sleep(0.1)
    host.remove_fixed_paths(state.existed_before, state.network)
    left = host.leftovers(state_dir, state.bridge, state.existed_before, state.network)
    if not left:  # nothing more to clean: a later start or `down` finds no unfinished run here
        (state_dir / STATE_FILE).replace(state_dir / LAST_STATE_FILE)
    return left


def node_lock_free() -> bool:
    """True when no real node holds the machine-wide lock."""
    if not NODE_LOCK.exists():
        return True
    with open(NODE_LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
        return True
