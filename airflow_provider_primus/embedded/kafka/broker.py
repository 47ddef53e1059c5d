"""One Apache Kafka broker in KRaft combined mode, as a child process on loopback.

The broker is the real thing (``kafka.Kafka`` from the Maven-resolved jars) so tests see Kafka's
actual group, offset and retention behaviour. Lifecycle guarantees:

* listeners bind 127.0.0.1 only, on free ports chosen at start (a port race retries with new ones);
* ready means the port answers *and* an admin metadata call succeeds;
* an *attached* broker (tests) receives SIGTERM when its launching thread dies (PR_SET_PDEATHSIG), so
  a killed pytest never leaves a JVM behind; a *detached* one (``primus kafka up``) outlives the CLI
  and is found again through its state file;
* stop sends SIGTERM to the broker's process group, waits for a clean shutdown, then SIGKILL;
* the data survive a stop: started again on the same work dir, the broker keeps its cluster id,
  topics and offsets (and its ports where they are free), so a consumer's checkpointed offsets still
  name the same records. Only an empty directory is formatted; ``reset=True`` wipes it first;
* optionally (``secured=SecuredListener()``) a SASL_SSL listener with SCRAM beside the PLAINTEXT one,
  with a CA and broker certificate generated for the work dir (``tls.py``) and the SCRAM user created
  through the admin API, so clients are tested the way they meet a secured cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from airflow_provider_primus.embedded.kafka.distribution import KafkaDistribution
from airflow_provider_primus.embedded.kafka.tls import BrokerTls, ensure_broker_tls
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.process import stop_process_group, tied_to_launcher

LOOPBACK = "127.0.0.1"
# Marks broker JVMs started by this package; tests and scripts find stray ones by it.
INSTANCE_PROPERTY = "primus.embedded.kafka"


class BrokerError(PrimusError):
    """The broker could not start or stop; the message carries the tail of its log."""


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class SecuredListener:
    """A SASL_SSL listener with one SCRAM user, beside the PLAINTEXT one (which stays the broker's
    own, for inter-broker traffic and the readiness probe). The password is random unless given and
    never shows in a repr or the state file."""

    username: str = "primus"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18), repr=False)
    mechanism: str = "SCRAM-SHA-256"

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_MECHANISMS:
            raise ValueError(
                f"mechanism must be one of {', '.join(SCRAM_MECHANISMS)} (got {self.mechanism!r})"
            )


@dataclass(frozen=True)
class BrokerState:
    """What a running broker is, as written to ``state.json`` in its work dir."""

    pid: int
    bootstrap_servers: str
    controller_port: int
    workdir: str
    version: str
    cluster_id: str
    instance: str
    startup_seconds: float
    # The secured listener, when there is one: where it is, the CA that signed its certificate, and
    # the SASL mechanism and user (the password is the SecuredListener's, never written here).
    secured_bootstrap_servers: str | None = None
    ca_file: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    # A second plaintext listener on another of this machine's addresses (``also_on``), for clients
    # that cannot reach its loopback: pods on a node's bridge.
    external_bootstrap_servers: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def load(cls, path: Path) -> BrokerState:
        return cls(**json.loads(path.read_text()))


def new_cluster_id() -> str:
    """16 random bytes in unpadded base64url, never starting with '-' (the tool would read a flag)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def secured_properties(port: int, tls: BrokerTls, mechanism: str) -> dict[str, str]:
    """The SASL_SSL listener's settings: PEM stores (Kafka 4 reads them as they are) and SCRAM."""
    prefix = "listener.name.sasl_ssl"
    return {
        "sasl.enabled.mechanisms": mechanism,
        f"{prefix}.sasl.enabled.mechanisms": mechanism,
        f"{prefix}.{mechanism.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{prefix}.ssl.keystore.type": "PEM",
        f"{prefix}.ssl.keystore.location": str(tls.keystore_file),
        f"{prefix}.ssl.truststore.type": "PEM",
        f"{prefix}.ssl.truststore.location": str(tls.ca_file),
        f"{prefix}.ssl.client.auth": "none",
    }


def server_properties(
    *,
    port: int,
    controller_port: int,
    log_dir: Path,
    extra: dict[str, str] | None = None,
    secured_port: int | None = None,
    secured: dict[str, str] | None = None,
    external: tuple[str, int] | None = None,
) -> dict[str, str]:
    """``secured_port``/``secured``: a SASL_SSL listener and its settings (``secured_properties``).
    ``external``: a plaintext listener ``EXTERNAL`` on (host, port), advertised as that address, so
    a client that connected there is sent there again (not to loopback)."""
    listeners = f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}"
    advertised = f"PLAINTEXT://{LOOPBACK}:{port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if external is not None:
        listeners += f",EXTERNAL://{external[0]}:{external[1]}"
        advertised += f",EXTERNAL://{external[0]}:{external[1]}"
        protocols += ",EXTERNAL:PLAINTEXT"
    if secured_port is not None:
        listeners += f",SASL_SSL://{LOOPBACK}:{secured_port}"
        advertised += f",SASL_SSL://{LOOPBACK}:{secured_port}"
        protocols += ",SASL_SSL:SASL_SSL"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": listeners,
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # Fewer internal partitions: the first consumer group is ready in well under a second.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "log.retention.hours": "168",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }
    props.update(secured or {})
    props.update(extra or {})
    return props


def _write_properties(path: Path, props: dict[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))


def _java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise BrokerError("no `java` on PATH and JAVA_HOME unset; Kafka 4.x needs Java 17+")
    return java


def broker_answers(bootstrap_servers: str, timeout_s: float = 5.0, **client: Any) -> bool:
    """An admin metadata call: the proof that the broker serves clients, not only that a port is open.
    ``client``: further kafka-python settings (a secured listener's)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError, KafkaError

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=int(timeout_s * 1000),
            client_id="primus-readiness",
            **client,
        )
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError, ValueError):
        return False
    try:
        cluster = admin.describe_cluster()
        return bool(cluster.get("brokers"))
    except (KafkaError, OSError, ValueError):
        return False
    finally:
        admin.close()


def _formatted_cluster_id(data_dir: Path) -> str | None:
    """The cluster id a formatted KRaft log directory carries, None when it was never formatted."""
    try:
        text = (data_dir / "meta.properties").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id" and value.strip():
            return value.strip()
    return None


def _reuse(port: Any, avoid: int | None = None, host: str = LOOPBACK) -> int | None:
    """``port`` when it is a port number this machine can bind now, else None."""
    if not isinstance(port, int) or port == avoid:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the broker binds (Java sets SO_REUSEADDR): the old broker's TIME_WAIT pairs do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return None
    return port


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((LOOPBACK, port)) == 0


class EmbeddedKafka:
    """Start, probe and stop one broker. Use as a context manager in tests."""

    def __init__(
        self,
        dist: KafkaDistribution,
        workdir: Path,
        *,
        port: int | None = None,
        detach: bool = False,
        heap: str = "512m",
        instance: str = "dev",
        extra_properties: dict[str, str] | None = None,
        reset: bool = False,
        secured: SecuredListener | None = None,
        also_on: str | None = None,
    ) -> None:
        """``reset`` deletes the work dir's log data before starting; without it a broker started
        again on the same work dir keeps its topics and offsets (consumers resume where they were).
        ``secured``: also serve SASL_SSL with SCRAM on another loopback port (off by default).
        ``also_on``: also serve plaintext on this address of the machine (a node's pod gateway)."""
        self.also_on = also_on
        self.dist = dist
        self.reset = reset
        self.workdir = Path(workdir)
        self.requested_port = port
        self.detach = detach
        self.heap = heap
        self.instance = instance
        self.extra_properties = extra_properties or {}
        self.secured = secured
        self.process: subprocess.Popen[bytes] | None = None
        self.state: BrokerState | None = None

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    @property
    def cluster_file(self) -> Path:
        return self.workdir / "cluster.json"

    @property
    def log_file(self) -> Path:
        return self.workdir / "kafka.log"

    @property
    def bootstrap_servers(self) -> str:
        if self.state is None:
            raise BrokerError("broker not started")
        return self.state.bootstrap_servers

    def _java_cmd(self, main_class: str, *args: str) -> list[str]:
        log4j = self.workdir / "log4j2.properties"
        return [
            _java_executable(),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-D{INSTANCE_PROPERTY}={self.instance}",
            "-cp",
            self.dist.classpath(),
            main_class,
            *args,
        ]

    def start(self, timeout_s: float = 90.0, attempts: int = 3) -> BrokerState:
        self.workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        last_error: BrokerError | None = None
        for _ in range(attempts):
            try:
                return self._start_once(timeout_s, started)
            except BrokerError as exc:  # a port taken between choosing and binding: new ports
                last_error = exc
                if self.requested_port is not None:
                    break
        assert last_error is not None
        raise last_error

    def _start_once(self, timeout_s: float, started: float) -> BrokerState:
        data_dir = self.workdir / "data"
        if self.reset and data_dir.exists():
            shutil.rmtree(data_dir)
        self.reset = False  # a retry after a port race must not wipe what the first try formatted
        previous = self._previous_cluster()
        cluster_id = _formatted_cluster_id(data_dir)
        # The same ports as last time where they are free: clients that knew the broker find it again.
        port = self.requested_port or _reuse(previous.get("port")) or free_port()
        controller_port = _reuse(previous.get("controller_port"), avoid=port) or free_port()
        while controller_port == port:
            controller_port = free_port()
        secured_port: int | None = None
        secured_props: dict[str, str] | None = None
        tls: BrokerTls | None = None
        if self.secured is not None:
            secured_port = _reuse(previous.get("secured_port"), avoid=port) or free_port()
            while secured_port in (port, controller_port):
                secured_port = free_port()
            tls = ensure_broker_tls(self.workdir / "tls")
            secured_props = secured_properties(secured_port, tls, self.secured.mechanism)
        external: tuple[str, int] | None = None
        if self.also_on is not None:
            external = (self.also_on, _reuse(previous.get("external_port"), host=self.also_on)
                        or free_port(self.also_on))  # fmt: skip
        props_file = self.workdir / "server.properties"
        _write_properties(
            props_file,
            server_properties(
                port=port,
                controller_port=controller_port,
                log_dir=data_dir,
                extra=self.extra_properties,
                secured_port=secured_port,
                secured=secured_props,
                external=external,
            ),
        )
        (self.workdir / "log4j2.properties").write_text(
            resources.files(__package__).joinpath("resources/log4j2.properties").read_text()
        )
        if cluster_id is None:  # an empty (or new) data directory: the only case that formats
            if data_dir.exists() and any(data_dir.iterdir()):
                raise BrokerError(
                    f"{data_dir} holds data but no meta.properties: not a Kafka log directory; "
                    "move it away or start with reset"
                )
            cluster_id = new_cluster_id()
            fmt = subprocess.run(
                self._java_cmd("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props_file)),
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout_s,
            )
            if fmt.returncode != 0:
                raise BrokerError(f"formatting KRaft storage failed:\n{fmt.stdout}{fmt.stderr}")

        command = self._java_cmd("kafka.Kafka", str(props_file))
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                command if self.detach else tied_to_launcher(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )
        bootstrap = f"{LOOPBACK}:{port}"
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"broker exited with {self.process.returncode} during start-up:\n{self.log_tail()}"
                )
            if _port_open(port) and broker_answers(bootstrap):
                break
            if time.monotonic() > deadline:
                self._kill()
                raise BrokerError(f"broker not ready after {timeout_s:.0f}s:\n{self.log_tail()}")
            time.sleep(delay)  # waiting on another process's listener: nothing to block on
            delay = min(delay * 2, 0.5)
        secured_bootstrap = None
        if self.secured is not None and secured_port is not None and tls is not None:
            secured_bootstrap = f"{LOOPBACK}:{secured_port}"
            self._add_scram_user(bootstrap, secured_bootstrap, tls, deadline)
        self.state = BrokerState(
            pid=self.process.pid,
            bootstrap_servers=bootstrap,
            controller_port=controller_port,
            workdir=str(self.workdir),
            version=self.dist.version,
            cluster_id=cluster_id,
            instance=self.instance,
            startup_seconds=round(time.monotonic() - started, 2),
            secured_bootstrap_servers=secured_bootstrap,
            ca_file=str(tls.ca_file) if tls is not None else None,
            sasl_mechanism=self.secured.mechanism if self.secured is not None else None,
            sasl_username=self.secured.username if self.secured is not None else None,
            external_bootstrap_servers=f"{external[0]}:{external[1]}" if external else None,
        )
        self.state_file.write_text(self.state.to_json())
        ports = {"port": port, "controller_port": controller_port, "secured_port": secured_port,
                 "external_port": external[1] if external else None}  # fmt: skip
        self.cluster_file.write_text(json.dumps({"cluster_id": cluster_id, **ports}))
        return self.state

    def secured_client(self) -> dict[str, Any]:
        """kafka-python settings that reach the secured listener as its SCRAM user (tests, tools)."""
        if self.state is None or self.secured is None or self.state.secured_bootstrap_servers is None:
            raise BrokerError("no secured listener: start the broker with secured=SecuredListener()")
        return {
            "bootstrap_servers": self.state.secured_bootstrap_servers,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": self.secured.mechanism,
            "sasl_plain_username": self.secured.username,
            "sasl_plain_password": self.secured.password,
            "ssl_cafile": self.state.ca_file,
        }

    def _add_scram_user(
        self, bootstrap: str, secured_bootstrap: str, tls: BrokerTls, deadline: float
    ) -> None:
        """Create (or update) the SCRAM user over the PLAINTEXT listener, then wait until the secured
        listener accepts it: credentials travel through the metadata log, so they are not usable at
        once. Idempotent, so a restarted broker (or a changed password) needs no reformat."""
        from kafka import KafkaAdminClient
        from kafka.admin import UserScramCredentialUpsertion

        assert self.secured is not None
        admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="primus-scram-setup")
        try:
            upsert = UserScramCredentialUpsertion(
                self.secured.username, self.secured.mechanism, self.secured.password
            )
            failed = admin.alter_user_scram_credentials([upsert]).get(self.secured.username)
        finally:
            admin.close()
        if failed:
            raise BrokerError(f"creating SCRAM user {self.secured.username!r} failed: {failed}")
        client = {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": self.secured.mechanism,
            "sasl_plain_username": self.secured.username,
            "sasl_plain_password": self.secured.password,
            "ssl_cafile": str(tls.ca_file),
        }
        delay = 0.05
        while not broker_answers(secured_bootstrap, timeout_s=5.0, **client):
            if time.monotonic() > deadline:
                self._kill()
                raise BrokerError(f"secured listener not ready for its SCRAM user:\n{self.log_tail()}")
            time.sleep(delay)  # the user's credential reaches the listener through the metadata log
            delay = min(delay * 2, 0.5)

    def _previous_cluster(self) -> dict[str, Any]:
        """Ports and id of the broker that last ran on this work dir (kept across ``stop``)."""
        try:
            found: dict[str, Any] = json.loads(self.cluster_file.read_text())
        except (OSError, ValueError):
            return {}
        return found

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process is not None:
            stop_process_group(self.process.pid, child=self.process, grace_s=timeout_s)
            self.process = None
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        self.state = None

    def _kill(self) -> None:
        if self.process is not None:
            stop_process_group(self.process.pid, child=self.process, grace_s=0)

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def is_embedded_broker(pid: int) -> bool:
    """True when ``pid`` is a live broker JVM this package started (a recycled pid is not)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.startswith(f"-D{INSTANCE_PROPERTY}=".encode()) for arg in cmdline)


def running_state(workdir: Path) -> BrokerState | None:
    """The state of the detached broker recorded in ``workdir``, if it is still running."""
    state_file = Path(workdir) / "state.json"
    if not state_file.is_file():
        return None
    state = BrokerState.load(state_file)
    return state if is_embedded_broker(state.pid) else None


def stop_detached(workdir: Path, timeout_s: float = 30.0) -> BrokerState | None:
    state = running_state(workdir)
    if state is not None:
        stop_process_group(state.pid, grace_s=timeout_s)
    with contextlib.suppress(FileNotFoundError):
        (Path(workdir) / "state.json").unlink()
    return state
