"""A job's certificate authority: made when the job is submitted, trusted by every client of the job.

Each job gets its own CA, so a certificate of one job is worth nothing against another (the token
still authorises; TLS proves the server is the job's and keeps the token and the data private on
the wire). The CA is written where the job's token is (local: 0600 files under the job's directory;
Kubernetes: a Secret owned by the PrimusJob, mounted into the job's pods). Every server of the job
(the master's control API, its dispatcher, each data executor) issues itself a leaf certificate at
start, from the CA, naming exactly the address it serves on: an executor's pod IP is known only
inside the pod, so the pod issues its own. Clients trust the job's CA only, never the system's.

Like ``credentials.py``, this module is top-level and imports no server library: the CLI, the hook
and the Kubernetes code read a job's CA without paying for pyarrow. Keys are EC P-256 (generating
one takes a millisecond; an RSA key a hundred). Private keys are never logged.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from airflow_provider_primus.errors import PrimusError

__all__ = [
    "ADVERTISE_ENV",
    "CA_FILE",
    "CA_KEY_FILE",
    "TLS_DIR_ENV",
    "TLS_MOUNT",
    "JobCa",
    "TlsError",
    "ca_certificate",
    "leaf_certificate",
    "load_job_ca",
    "tls_secret",
    "tls_secret_name",
    "verify_context",
    "write_private",
]

# A server bound to every interface (``0.0.0.0`` in a pod) tells its peers this address instead, and
# names it in its certificate: the Kubernetes backend sets it to the pod's IP (downward API).
ADVERTISE_ENV = "PRIMUS_ADVERTISE_HOST"
# A process of the job finds the job's CA in this folder (the master sets it for its executors;
# in a pod it is where the job's TLS Secret is mounted). A path, never the key itself.
TLS_DIR_ENV = "PRIMUS_TLS_DIR"
TLS_MOUNT = "/var/run/primus/tls"
CA_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
VALID_DAYS = 365


class TlsError(PrimusError):
    """A job's TLS material is missing or unusable (the message says which and where)."""


def write_private(path: Path, data: bytes) -> None:
    """A key file created anew with mode 0600 (``O_EXCL`` after removing any old one, so it never
    keeps a laxer mode from an earlier file)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def ca_certificate(
    key: Any, common_name: str, not_before: dt.datetime, not_after: dt.datetime
) -> x509.Certificate:
    """A self-signed CA for ``key`` (RSA or EC) that may sign leaf certificates only (path length 0)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def leaf_certificate(  # noqa: PLR0917 - one certificate, every part of it
    ca_key: Any,
    ca_cert: x509.Certificate,
    key: Any,
    hosts: Iterable[str],
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    """A server certificate for ``key`` signed by the CA, valid for exactly ``hosts`` (IP addresses
    become IP SANs, names DNS SANs): clients check the address they dialled against them."""
    names = list(dict.fromkeys(h for h in hosts if h))
    if not names:
        raise TlsError("a server certificate needs at least one address to name")
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate a little clock skew


_PEM = serialization.Encoding.PEM


def _key_pem(key: Any) -> bytes:
    return bytes(key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


@dataclass(frozen=True)
class JobCa:
    """A job's CA: its certificate (public, what clients trust) and key (what servers sign with)."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def create(cls, job: str, days: int = VALID_DAYS) -> JobCa:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        cert = ca_certificate(key, f"primus job {job} CA"[:64], now, now + dt.timedelta(days=days))
        return cls(cert.public_bytes(_PEM), _key_pem(key))

    def issue(self, hosts: Iterable[str], days: int = VALID_DAYS) -> tuple[bytes, bytes]:
        """A fresh key and a certificate for it naming ``hosts``: (certificate PEM, key PEM)."""
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        end = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
        cert = leaf_certificate(ca_key, ca_cert, key, hosts, now, end)
        return cert.public_bytes(_PEM), _key_pem(key)

    def write(self, folder: Path) -> None:
        """The CA's files under ``folder``: the key 0600, the certificate last (its presence means
        the pair is complete)."""
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(folder / CA_KEY_FILE, self.key_pem)
        write_private(folder / CA_FILE, self.cert_pem)

    @classmethod
    def read(cls, folder: Path, *, key: bool = True) -> JobCa:
        """The CA under ``folder``; ``key=False`` for a client, which needs the certificate only."""
        try:
            cert = (folder / CA_FILE).read_bytes()
            key_pem = (folder / CA_KEY_FILE).read_bytes() if key else b""
        except FileNotFoundError as exc:
            raise TlsError(f"the job's TLS certificate authority is missing: {exc.filename}") from None
        return cls(cert, key_pem)


def load_job_ca(folder: Path | None = None, *, key: bool = True) -> JobCa | None:
    """The job's CA for a process of the job: ``folder`` or ``$PRIMUS_TLS_DIR``; None when neither
    names one (the job runs without TLS)."""
    if folder is None:
        where = os.environ.get(TLS_DIR_ENV)
        if not where:
            return None
        folder = Path(where)
    return JobCa.read(folder, key=key)


def verify_context(ca_pem: bytes | str) -> ssl.SSLContext:
    """A client context that trusts the job's CA and nothing else, and checks the server's name."""
    context = ssl.create_default_context(cadata=ca_pem.decode() if isinstance(ca_pem, bytes) else ca_pem)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


# --- the Kubernetes Secret ------------------------------------------------------------------------


def tls_secret_name(job: str) -> str:
    return f"{job}-tls"


def tls_secret(
    job: str,
    ca: JobCa,
    *,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The job's CA as a Secret, owned by the PrimusJob (deleted with it), mounted into its pods at
    ``TLS_MOUNT``; a client outside reads ``ca.crt`` from it."""
    meta: dict[str, Any] = {"name": tls_secret_name(job)}
    if labels:
        meta["labels"] = dict(labels)
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    data = {CA_FILE: ca.cert_pem, CA_KEY_FILE: ca.key_pem}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def ca_from_secret(secret: Mapping[str, Any], *, key: bool = True) -> JobCa:
    data = secret.get("data") or {}
    return JobCa(base64.b64decode(data[CA_FILE]), base64.b64decode(data[CA_KEY_FILE]) if key else b"")
