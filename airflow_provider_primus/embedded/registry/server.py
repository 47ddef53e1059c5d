"""One Apicurio Registry on loopback, serving the Confluent-compatible API over TLS.

TLS because a registry in production is reached over HTTPS and the client's CA handling is the part
worth testing: a CA and a certificate naming 127.0.0.1 and localhost are generated into the work dir
(keys 0600), plain HTTP is refused. Storage is the registry's in-memory H2: a session's schemas
die with it. Readiness is the registry's own ``/health/ready`` answering, polled with a growing
interval under a deadline, never a fixed sleep.

Basic auth is not configured: Apicurio 2.6 checks credentials only through an OIDC server (its
``registry.auth.*`` settings exchange them with Keycloak), and its build carries no properties-file
realm, so a username and password cannot be set on the server alone.
"""

from __future__ import annotations

import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.embedded.registry.distribution import RegistryDistribution
from airflow_provider_primus.embedded.server_process import LOOPBACK, ServerProcess, free_ports
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.tls import JobCa, write_private

__all__ = ["CCOMPAT_PATH", "EmbeddedRegistry", "RegistryServerError", "RegistryState"]

CCOMPAT_PATH = "/apis/ccompat/v7"


class RegistryServerError(PrimusError):
    """The registry exited or did not become ready; the message carries its log's tail."""


@dataclass(frozen=True)
class RegistryState:
    pid: int
    base_url: str  # https://127.0.0.1:<port>
    ca_file: str  # the CA that signed the server's certificate
    startup_seconds: float

    @property
    def url(self) -> str:
        """The Confluent-compatible API's root: what a client's ``registry.url`` names."""
        return self.base_url + CCOMPAT_PATH


class EmbeddedRegistry(ServerProcess[RegistryState]):
    """``java -jar <runner>`` with HTTPS on a free loopback port."""

    log_name = "registry.log"
    stop_grace_s = 20.0

    def __init__(self, dist: RegistryDistribution, workdir: Path, *, java: str | None = None) -> None:
        super().__init__(workdir)
        self.dist = dist
        self.java = java or shutil.which("java") or "java"

    def _tls(self) -> tuple[Path, Path, Path]:
        ca_file, cert_file, key_file = (self.workdir / n for n in ("ca.pem", "cert.pem", "key.pem"))
        if not all(p.is_file() for p in (ca_file, cert_file, key_file)):
            ca = JobCa.create("embedded-registry")
            cert, key = ca.issue([LOOPBACK, "localhost"])
            write_private(key_file, key)
            write_private(cert_file, cert)
            write_private(ca_file, ca.cert_pem)
        return ca_file, cert_file, key_file

    def start(self, timeout_s: float = 120.0) -> RegistryState:
        if self.running():
            raise RegistryServerError("already running")
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_file, cert_file, key_file = self._tls()
        [port] = free_ports(1)
        command = [
            self.java,
            "-Xmx384m",
            "-XX:TieredStopAtLevel=1",  # start fast: the tests' load is small
            f"-Dquarkus.http.host={LOOPBACK}",
            "-Dquarkus.http.port=0",
            f"-Dquarkus.http.ssl-port={port}",
            "-Dquarkus.http.insecure-requests=disabled",
            f"-Dquarkus.http.ssl.certificate.files={cert_file}",
            f"-Dquarkus.http.ssl.certificate.key-files={key_file}",
            "-Dquarkus.log.console.color=false",
            "-jar",
            str(self.dist.runner),
        ]
        process = self.spawn(command)
        base_url = f"https://{LOOPBACK}:{port}"
        context = ssl.create_default_context(cafile=str(ca_file))
        try:
            self._wait_ready(base_url, context, started + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.state = RegistryState(
            pid=process.pid,
            base_url=base_url,
            ca_file=str(ca_file),
            startup_seconds=round(time.monotonic() - started, 2),
        )
        return self.state

    def _wait_ready(self, base_url: str, context: ssl.SSLContext, deadline: float) -> None:
        delay = 0.1
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RegistryServerError(
                    f"Apicurio Registry exited with {self.process.returncode}:\n{self._log_tail()}"
                )
            if _ready(base_url, context):
                return
            if time.monotonic() > deadline:
                raise RegistryServerError(
                    f"Apicurio Registry not ready within the deadline:\n{self._log_tail()}"
                )
            time.sleep(delay)  # no notification to block on: poll, growing, bounded by the deadline
            delay = min(delay * 1.5, 0.5)


def _ready(base_url: str, context: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health/ready", timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False
