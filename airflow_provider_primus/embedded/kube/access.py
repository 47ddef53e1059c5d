"""Reaching the embedded control plane: its generated credentials, kubeconfigs and API clients.

Credentials are generated per start: a CA and serving certificate (ECDSA P-256, with 127.0.0.1 in the
SANs so clients verify TLS instead of skipping it), the service-account signing key, and random
static bearer tokens — ``admin`` in ``system:masters``, the scheduler as ``system:kube-scheduler``
(bound by the API server's bootstrap RBAC), plus any users the caller names with their groups.

Separate from the processes (``cluster.py``): what a client needs to reach the cluster changes with
the PKI and the client library, not with how the components are started and stopped.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from airflow_provider_primus.errors import PrimusError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
ADMIN = "admin"
SCHEDULER_USER = "system:kube-scheduler"


class KubeClusterError(PrimusError):
    """A component could not start or a wait ran out; the message carries the relevant log tail."""


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


def _write_private(path: Path, data: str | bytes) -> None:
    """Create (or truncate) ``path`` readable by its owner only, before any secret is in it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def write_credentials(pki: Path) -> tuple[Path, Path, Path, Path, Path]:
    """A CA, a serving certificate for the API server and the service-account key pair.

    ECDSA P-256 throughout: generating RSA-2048 keys costs ~100 ms each in Python, EC keys a
    fraction of a millisecond, and both the API server and every client accept them.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from airflow_provider_primus.tls import ca_certificate

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = ca_certificate(ca_key, "primus-embedded-kube-ca", not_before, not_after)

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
        .issuer_name(ca_cert.subject)
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


def write_token_file(path: Path, users: Mapping[str, Sequence[str]]) -> dict[str, str]:
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
