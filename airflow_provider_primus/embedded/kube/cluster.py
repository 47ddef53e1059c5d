"""One Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler and kwok.

The API server, its admission chain, RBAC and the scheduler are the real ones of the pinned release,
so what the Kubernetes backend does here is what it does against a production cluster. Nodes and
pod lifecycles are simulated by kwok with the stages in ``stages.yaml`` (pods run until deleted; an
annotation makes one exit with a chosen code; in-place resizes are mirrored into the status).

What is missing on purpose: kube-controller-manager. Nothing garbage-collects owned objects,
finishes a namespace deletion or creates ``default`` service accounts, and the TaintNodesByCondition
admission plugin is off (its not-ready taint is only ever removed by the node lifecycle controller).
``create_namespace`` makes the namespace usable for pods by creating its ``default`` ServiceAccount.

Lifecycle guarantees, as for the embedded Kafka broker:

* everything binds 127.0.0.1 on free ports chosen at start (a lost port race retries with new ones);
* ready means answering, not a sleep: etcd ``/health``, the API server's ``/readyz`` with the admin
  token (TLS verified against our CA), the scheduler's and kwok's health endpoints;
* each child gets SIGTERM when the launching thread dies (``tied_to_launcher``), so a killed pytest
  leaves nothing behind; ``stop()`` ends kwok, scheduler, API server, etcd in that order and waits.

Credentials and clients are in ``access.py``; the namespaces, nodes and pod waits that tests and
benchmarks need are in ``objects.py``.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from airflow_provider_primus.embedded.kube import objects
from airflow_provider_primus.embedded.kube.access import (
    ADMIN,
    LOOPBACK,
    SCHEDULER_USER,
    SERVICE_CIDR,
    ClusterState,
    KubeClusterError,
    write_credentials,
    write_token_file,
)
from airflow_provider_primus.embedded.kube.binaries import KubeBinaries
from airflow_provider_primus.embedded.kube.objects import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE, NODE_IP_RANGE
from airflow_provider_primus.process import stop_process_group, tied_to_launcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

# kwok hands out pod IPs from here; its default (10.0.0.0/24) overlaps the service range and holds
# only 254 pods.
POD_CIDR = "127.244.0.0/16"  # simulated pod addresses, loopback like the nodes'
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
# Read by the stages in stages.yaml.
EXIT_CODE_ANNOTATION = "primus.dev/kwok-exit-code"
RUN_DURATION_ANNOTATION = "primus.dev/kwok-run-duration"
# Stopped in this order: clients of the API server first, etcd last.
COMPONENTS = ("kwok", "kube-scheduler", "kube-apiserver", "etcd")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


# --- probes ----------------------------------------------------------------------------------------


def _get(
    port: int, path: str, *, tls: ssl.SSLContext | None = None, token: str | None = None
) -> tuple[int, bytes]:
    """One GET on loopback; (0, b"") when nothing answers yet."""
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection(LOOPBACK, port, timeout=2.0, context=tls)
        if tls is not None
        else http.client.HTTPConnection(LOOPBACK, port, timeout=2.0)
    )
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return 0, b""
    finally:
        conn.close()


def _unverified_tls() -> ssl.SSLContext:
    """For the scheduler's health port only: it serves a throwaway self-signed certificate."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class KubeCluster:
    """Start, probe and stop one control plane; a context manager for tests."""

    def __init__(
        self,
        binaries: KubeBinaries,
        workdir: Path,
        *,
        users: Mapping[str, Sequence[str]] | None = None,
        stages: Path | None = None,
        scheduler_qps: int = 500,
        extra_apiserver_args: Sequence[str] = (),
    ) -> None:
        """``users``: extra static-token users and their groups (``{"alice": ["team-a"]}``), for
        tests that bind them to RBAC roles. ``stages``: a kwok stage file instead of ours."""
        self.binaries = binaries
        self.workdir = Path(workdir)
        reserved = {ADMIN, SCHEDULER_USER} & set(users or {})
        if reserved:
            raise ValueError(f"user names reserved by the cluster: {sorted(reserved)}")
        self.users: dict[str, list[str]] = {name: list(groups) for name, groups in (users or {}).items()}
        self.stages = stages
        self.scheduler_qps = scheduler_qps
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.state: ClusterState | None = None
        self._node_indices = itertools.count()  # nodes are numbered per cluster

    # --- lifecycle ---

    def start(self, timeout_s: float = 120.0, attempts: int = 3) -> ClusterState:
        """Start all four components and return once each answers; ``timeout_s`` covers all of it."""
        if self.processes:
            raise KubeClusterError(f"already started in {self.workdir}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        last_error: KubeClusterError | None = None
        for _ in range(attempts):
            try:
                self.state = self._start_once(timeout_s, started)
            except KubeClusterError as exc:
                self._stop_processes(grace_s=5.0)
                last_error = exc
                if "address already in use" not in str(exc):
                    break  # only a lost port race is worth another try
                continue
            except BaseException:
                self._stop_processes(grace_s=5.0)
                raise
            public = {k: v for k, v in asdict(self.state).items() if k != "tokens"}
            (self.workdir / "state.json").write_text(json.dumps(public, indent=2))
            return self.state
        assert last_error is not None
        raise last_error

    def _start_once(self, timeout_s: float, started: float) -> ClusterState:
        deadline = started + timeout_s
        timings: dict[str, float] = {}
        etcd_port, peer_port, api_port, sched_port, kwok_port = _free_ports(5)

        pki = self.workdir / "pki"
        ca_file, cert_file, key_file, sa_key, sa_pub = write_credentials(pki)
        users = {ADMIN: ["system:masters"], SCHEDULER_USER: [], **self.users}
        tokens = write_token_file(pki / "tokens.csv", users)

        data_dir = self.workdir / "etcd-data"
        if data_dir.exists():
            shutil.rmtree(data_dir)
        etcd_url, peer_url = f"http://{LOOPBACK}:{etcd_port}", f"http://{LOOPBACK}:{peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=primus",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=primus={peer_url}",
                "--initial-cluster-state=new",
                # A throwaway store: fsync buys durability we do not want and costs API latency.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._await("etcd", lambda: _get(etcd_port, "/health")[1].startswith(b'{"health":"true"'), deadline)
        timings["etcd"] = time.monotonic() - started

        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                # Kubelets (here simulated) are reached at their InternalIP, never by a name the
                # machine's resolver would look up.
                "--kubelet-preferred-address-types=InternalIP",
                f"--secure-port={api_port}",
                f"--tls-cert-file={cert_file}",
                f"--tls-private-key-file={key_file}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # Its not-ready taint is removed only by kube-controller-manager, which we do not run.
                "--disable-admission-plugins=TaintNodesByCondition",
                # Endpoints may not point at loopback; the `kubernetes` service is not needed here.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self.extra_apiserver_args,
            ],
        )
        api_tls = ssl.create_default_context(cafile=str(ca_file))
        admin = tokens[ADMIN]
        self._await(
            "kube-apiserver", lambda: _get(api_port, "/readyz", tls=api_tls, token=admin)[0] == 200, deadline
        )
        timings["kube-apiserver"] = time.monotonic() - started

        state = ClusterState(
            server=f"https://{LOOPBACK}:{api_port}",
            ca_file=str(ca_file),
            tokens=tokens,
            workdir=str(self.workdir),
            version=self.binaries.version,
            startup_seconds=0.0,
        )
        sched_kubeconfig = state.kubeconfig(SCHEDULER_USER)
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.scheduler),
                f"--kubeconfig={sched_kubeconfig}",
                f"--authentication-kubeconfig={sched_kubeconfig}",
                f"--authorization-kubeconfig={sched_kubeconfig}",
                # No client-CA or request-header flags on the API server: it never publishes the
                # configmap this lookup wants, and the scheduler would log its absence for ever.
                "--authentication-skip-lookup=true",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={sched_port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                f"--kube-api-qps={self.scheduler_qps}",
                f"--kube-api-burst={self.scheduler_qps * 2}",
            ],
        )
        stages = self.workdir / "kwok-stages.yaml"  # a copy: what ran stays next to its log
        stages.write_text(
            self.stages.read_text()
            if self.stages is not None
            else resources.files(__package__).joinpath("stages.yaml").read_text()
        )
        kwok_home = self.workdir / "kwok"
        kwok_home.mkdir(exist_ok=True)
        self._spawn(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={state.kubeconfig(ADMIN)}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
                f"--config={stages}",
                f"--server-address={LOOPBACK}:{kwok_port}",
                f"--cidr={POD_CIDR}",
                f"--node-ip={NODE_IP_RANGE[1]}",
            ],
            # kwok also reads ~/.kwok/kwok.yaml when present: point its home at our work dir.
            env_extra={"KWOK_WORKDIR": str(kwok_home)},
        )
        insecure = _unverified_tls()
        self._await("kube-scheduler", lambda: _get(sched_port, "/readyz", tls=insecure)[0] == 200, deadline)
        timings["kube-scheduler"] = time.monotonic() - started
        self._await("kwok", lambda: _get(kwok_port, "/healthz")[0] == 200, deadline)
        timings["kwok"] = time.monotonic() - started
        return ClusterState(
            server=state.server,
            ca_file=state.ca_file,
            tokens=tokens,
            workdir=state.workdir,
            version=state.version,
            startup_seconds=round(time.monotonic() - started, 2),
            component_seconds={name: round(s, 2) for name, s in timings.items()},
        )

    def _spawn(self, name: str, command: list[str], env_extra: Mapping[str, str] | None = None) -> None:
        env = {**os.environ, **(env_extra or {})}
        with open(self.log_file(name), "ab") as log:
            self.processes[name] = subprocess.Popen(
                tied_to_launcher(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
                env=env,
            )

    def _await(self, name: str, ready: Callable[[], bool], deadline: float) -> None:
        """Poll ``ready`` until it holds; fail fast when the process exits, with its log tail."""
        proc = self.processes[name]
        delay = 0.02
        while True:
            if proc.poll() is not None:
                raise KubeClusterError(
                    f"{name} exited with {proc.returncode} during start-up:\n{self.log_tail(name)}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise KubeClusterError(f"{name} not ready before the deadline:\n{self.log_tail(name)}")
            time.sleep(delay)  # another process's listener: nothing to block on
            delay = min(delay * 1.5, 0.25)

    def log_file(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_file(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _stop_processes(self, grace_s: float) -> None:
        for name in COMPONENTS:
            proc = self.processes.pop(name, None)
            if proc is not None:
                stop_process_group(proc.pid, child=proc, grace_s=grace_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop_processes(grace_s=timeout_s)
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / "state.json").unlink()
        self.state = None

    def __enter__(self) -> KubeCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients and helpers ---

    def _require_state(self) -> ClusterState:
        if self.state is None:
            raise KubeClusterError("cluster not started")
        return self.state

    def api_client(self, user: str = ADMIN) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for ``user``; close it when done."""
        return self._require_state().api_client(user)

    def kubeconfig(self, user: str = ADMIN) -> Path:
        return self._require_state().kubeconfig(user)

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """The namespace and its ``default`` ServiceAccount (see ``objects.create_namespace``)."""
        objects.create_namespace(self._require_state(), name, labels)

    def add_nodes(
        self,
        count: int,
        *,
        cpu: str = "32",
        memory: str = "256Gi",
        pods: int = 110,
        prefix: str = "kwok-node",
        labels: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> list[str]:
        """Create ``count`` kwok-managed nodes and wait until every one is Ready; their names
        continue this cluster's sequence: ``<prefix>-<n>``."""
        return objects.add_nodes(
            self._require_state(),
            self._node_indices,
            count,
            cpu=cpu,
            memory=memory,
            pods=pods,
            prefix=prefix,
            labels=labels,
            timeout_s=timeout_s,
            kwok_log_tail=lambda: self.log_tail("kwok"),
        )

    def wait_for_pod(
        self, namespace: str, name: str, condition: Callable[[Any], bool], timeout_s: float = 30.0
    ) -> Any:
        """Watch one pod until ``condition(pod)`` holds and return that pod (a ``V1Pod``; ``None``
        once deleted, so ``lambda p: p is None`` waits for a deletion)."""
        return objects.wait_for_pod(self._require_state(), namespace, name, condition, timeout_s)
