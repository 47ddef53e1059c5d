"""A certificate authority and a broker certificate for the embedded broker's secured listener.

Generated per work dir, in PEM, because Kafka 4 reads PEM key and trust stores directly
(``ssl.keystore.type=PEM``): no keytool, no JKS passwords. The broker certificate names 127.0.0.1 and
localhost, so clients verify the hostname as they would against a real cluster. The private keys are
written 0600 and never leave the work dir.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BrokerTls", "ensure_broker_tls"]


@dataclass(frozen=True)
class BrokerTls:
    """Where the CA certificate (for clients' ``ssl_cafile``), the broker's key store (key and chain
    in one PEM file) and the broker's certificate are."""

    ca_file: Path
    keystore_file: Path
    cert_file: Path


def ensure_broker_tls(folder: Path, *, days: int = 30) -> BrokerTls:
    """The CA and broker certificate under ``folder``, generated once (a restarted broker keeps the
    certificate its clients already trust)."""
    tls = BrokerTls(folder / "ca.pem", folder / "broker-keystore.pem", folder / "broker-cert.pem")
    if all(p.is_file() for p in (tls.ca_file, tls.keystore_file, tls.cert_file)):
        return tls
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from airflow_provider_primus.tls import ca_certificate, leaf_certificate, write_private

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate a little clock skew
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_cert = ca_certificate(ca_key, "primus embedded kafka test CA", now, now + dt.timedelta(days=days))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    expires = now + dt.timedelta(days=days)
    cert = leaf_certificate(ca_key, ca_cert, key, ["localhost", "127.0.0.1"], now, expires)
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    cert_pem = cert.public_bytes(pem)
    ca_pem = ca_cert.public_bytes(pem)
    write_private(tls.keystore_file, key_pem + cert_pem + ca_pem)
    tls.cert_file.write_bytes(cert_pem)
    tls.ca_file.write_bytes(ca_pem)  # written last: its presence means the set is complete
    return tls
