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

Credentials are generated per start: a CA and serving certificate (ECDSA P-256, with 127.0.0.1 in the
SANs so clients verify TLS instead of skipping it), the service-account signing key, and random
static bearer tokens — ``admin`` in ``system:masters``, the scheduler as ``system:kube-scheduler``
(bound by the API server's bootstrap RBAC), plus any users the caller names with their groups.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from airflow_provider_primus.embedded.kube.binaries import KubeBinaries
from airflow_provider_primus.process import stop_process_group, tied_to_launcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
# kwok hands out pod IPs from here; its default (10.0.0.0/24) overlaps the service range and holds
# only 254 pods.
POD_CIDR = "10.244.0.0/16"
NODE_IP_RANGE = ipaddress.ip_network("10.240.0.0/16")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
ADMIN = "admin"
SCHEDULER_USER = "system:kube-scheduler"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
# Read by the stages in stages.yaml.
EXIT_CODE_ANNOTATION = "primus.dev/kwok-exit-code"
RUN_DURATION_ANNOTATION = "primus.dev/kwok-run-duration"
# Stopped in this order: clients of the API server first, etcd last.
COMPONENTS = ("kwok", "kube-scheduler", "kube-apiserver", "etcd")


class KubeClusterError(RuntimeError):
    """A component could not start or a wait ran out; the message carries the relevant log tail."""


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


@dataclass(frozen=True)
class ClusterState:
    """How to reach a running cluster: enough to write kubeconfigs and build clients."""

    server: str
    ca_file: str
    tokens: Mapping[str, str] = field(repr=False)  # user -> bearer token; kept out of reprs and logs
    workdir: str
    version: str
    startup_seconds: float
    component_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def admin_token(self) -> str:
        return self.tokens[ADMIN]

    def token(self, user: str = ADMIN) -> str:
        try:
            return self.tokens[user]
        except KeyError:
            raise KubeClusterError(
                f"no static token for user {user!r}; known: {sorted(self.tokens)}"
            ) from None

    def kubeconfig(self, user: str = ADMIN, path: Path | None = None) -> Path:
        """Write a kubeconfig for ``user`` (bearer token, TLS verified against our CA); returns its path."""
        target = path or Path(self.workdir) / "kubeconfigs" / f"{user.replace(':', '_')}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "primus", "cluster": {"server": self.server, "certificate-authority": self.ca_file}}
            ],
            "users": [{"name": user, "user": {"token": self.token(user)}}],
            "contexts": [{"name": "primus", "context": {"cluster": "primus", "user": user}}],
            "current-context": "primus",
        }
        _write_private(target, yaml.safe_dump(doc, sort_keys=False))
        return target

    def api_client(self, user: str = ADMIN) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for ``user``; the caller closes it (it is a context manager)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        # The whole header value under the pre-36 key: client 36 finds it by alias, older ones by
        # name, and neither adds a prefix it looks up under a different key (36 would drop "Bearer").
        cfg.api_key = {"authorization": f"Bearer {self.token(user)}"}
        cfg.ssl_ca_cert = self.ca_file
        cfg.verify_ssl = True
        return client.ApiClient(cfg)


# --- credentials ---------------------------------------------------------------------------------


def _write_private(path: Path, data: str | bytes) -> None:
    """Create (or truncate) ``path`` readable by its owner only, before any secret is in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def _write_credentials(pki: Path) -> tuple[Path, Path, Path, Path, Path]:
    """A CA, a serving certificate for the API server and the service-account key pair.

    ECDSA P-256 throughout: generating RSA-2048 keys costs ~100 ms each in Python, EC keys a
    fraction of a millisecond, and both the API server and every client accept them.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "primus-embedded-kube-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(LOOPBACK)),
        x509.IPAddress(ipaddress.IPv4Network(SERVICE_CIDR)[1]),  # the `kubernetes` service IP
        *(
            x509.DNSName(name)
            for name in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths = (pki / "ca.crt", pki / "apiserver.crt", pki / "apiserver.key", pki / "sa.key", pki / "sa.pub")
    ca_file, cert_file, key_file, sa_key_file, sa_pub_file = paths
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_file, pem_key(key))
    _write_private(sa_key_file, pem_key(sa_key))
    sa_pub_file.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


def _write_token_file(path: Path, users: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The API server's static token file (``token,user,uid,"group1,group2"``); returns user -> token."""
    tokens: dict[str, str] = {}
    lines = []
    for user, groups in users.items():
        if "," in user or '"' in user or any("," in g or '"' in g for g in groups):
            raise ValueError(f"user and group names may not contain ',' or '\"': {user!r} {list(groups)}")
        token = secrets.token_urlsafe(24)
        tokens[user] = token
        line = f"{token},{user},{user}"
        if groups:
            line += f',"{",".join(groups)}"'
        lines.append(line)
    _write_private(path, "\n".join(lines) + "\n")
    return tokens


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
        self._nodes_created = 0

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
        ca_file, cert_file, key_file, sa_key, sa_pub = _write_credentials(pki)
        users = {ADMIN: ["system:masters"], SCHEDULER_USER: [], **self.users}
        tokens = _write_token_file(pki / "tokens.csv", users)

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
        """The namespace and its ``default`` ServiceAccount (which the ServiceAccount admission
        plugin requires of every pod, and which only kube-controller-manager would create)."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api_client:
            core = CoreV1Api(api_client)
            for create, args in (
                (core.create_namespace, ({"metadata": {"name": name, "labels": dict(labels or {})}},)),
                (core.create_namespaced_service_account, (name, {"metadata": {"name": "default"}})),
            ):
                try:
                    create(*args)
                except ApiException as exc:
                    if exc.status != 409:  # already there: creating is idempotent
                        raise

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
        """Create ``count`` kwok-managed nodes (no taints, label ``type=kwok``) and wait until kwok
        has made every one Ready. Names continue a per-cluster sequence: ``<prefix>-<n>``."""
        from kubernetes.client import CoreV1Api

        names: list[str] = []
        resources_ = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "1Ti"}
        with self.api_client() as api_client:
            core = CoreV1Api(api_client)
            for _ in range(count):
                index = self._nodes_created
                self._nodes_created += 1
                name = f"{prefix}-{index}"
                body = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            **dict(labels or {}),
                        },
                    },
                    "spec": {},
                    "status": {
                        "allocatable": resources_,
                        "capacity": resources_,
                        "addresses": [
                            {"type": "InternalIP", "address": str(NODE_IP_RANGE[index + 2])},
                            {"type": "Hostname", "address": name},
                        ],
                    },
                }
                core.create_node(body)
                names.append(name)
            wanted = set(names)
            deadline = time.monotonic() + timeout_s
            while True:
                # Raw JSON: building V1Node objects costs ~1 ms each, too slow for 1,000-node benches.
                listed = core.list_node(label_selector="type=kwok", _preload_content=False)
                ready = {
                    node["metadata"]["name"]
                    for node in json.loads(listed.data)["items"]
                    if any(
                        c.get("type") == "Ready" and c.get("status") == "True"
                        for c in node.get("status", {}).get("conditions") or []
                    )
                }
                if wanted <= ready:
                    return names
                if time.monotonic() > deadline:
                    raise KubeClusterError(
                        f"nodes not Ready after {timeout_s:.0f}s: {sorted(wanted - ready)}\n"
                        f"{self.log_tail('kwok')}"
                    )
                time.sleep(0.05)  # kwok patches the status within milliseconds

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        condition: Callable[[Any], bool],
        timeout_s: float = 30.0,
    ) -> Any:
        """Watch one pod until ``condition(pod)`` holds and return that pod (a ``V1Pod``; ``None``
        once deleted, so ``lambda p: p is None`` waits for a deletion)."""
        from kubernetes import watch
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        deadline = time.monotonic() + timeout_s
        last: Any = None
        with self.api_client() as api_client:
            core = CoreV1Api(api_client)
            while True:
                pods = core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
                last = pods.items[0] if pods.items else None
                if condition(last):
                    return last
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                watcher = watch.Watch()
                try:
                    for event in watcher.stream(
                        core.list_namespaced_pod,
                        namespace,
                        field_selector=f"metadata.name={name}",
                        resource_version=pods.metadata.resource_version,
                        timeout_seconds=max(1, int(left)),
                        _request_timeout=left + 5,
                    ):
                        if event["type"] == "ERROR":
                            break  # e.g. 410 Gone: list again
                        last = None if event["type"] == "DELETED" else event["object"]
                        if condition(last):
                            return last
                        if time.monotonic() > deadline:
                            break
                except ApiException as exc:
                    if exc.status != 410:
                        raise
                finally:
                    watcher.stop()
                if time.monotonic() > deadline:
                    break
        status = None if last is None else last.status
        raise KubeClusterError(
            f"pod {namespace}/{name}: condition not met within {timeout_s:.0f}s; last: {status}"
        )
