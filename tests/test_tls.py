"""A job's CA: certificates that name exactly the served address and chain to this job's CA only,
private files, and the Secret form the Kubernetes backend stores and mounts."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from cryptography import x509

from airflow_provider_primus.tls import (
    JobCa,
    TlsError,
    ca_from_secret,
    load_job_ca,
    tls_secret,
    verify_context,
)


def test_a_leaf_names_exactly_the_addresses_it_serves_on() -> None:
    ca = JobCa.create("job")
    cert_pem, key_pem = ca.issue(["10.1.2.3", "master.example"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.1.2.3")]
    assert san.get_values_for_type(x509.DNSName) == ["master.example"]
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert cert.issuer == ca_cert.subject and cert.not_valid_after_utc <= ca_cert.not_valid_after_utc
    assert b"PRIVATE KEY" in key_pem and b"PRIVATE KEY" not in cert_pem
    with pytest.raises(TlsError, match="at least one address"):
        ca.issue([])


def _handshake(server_ca: JobCa, client_ca: JobCa, host: str = "127.0.0.1") -> None:
    """One TLS handshake on loopback: a server with a certificate from ``server_ca`` for ``host``,
    a client trusting ``client_ca`` only."""
    cert, key = server_ca.issue([host])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c.pem").write_bytes(cert)
        (Path(tmp) / "k.pem").write_bytes(key)
        server.load_cert_chain(Path(tmp) / "c.pem", Path(tmp) / "k.pem")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            client = verify_context(client_ca.cert_pem)
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                tls.sendall(b"x")
        finally:
            thread.join(10)


def test_clients_trust_their_own_jobs_ca_and_its_named_address_only() -> None:
    ours, theirs = JobCa.create("ours"), JobCa.create("theirs")
    _handshake(ours, ours)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(theirs, ours)  # another job's server
    with pytest.raises(ssl.SSLCertVerificationError, match=r"IP address mismatch"):
        _handshake(ours, ours, host="10.9.9.9")  # ours, but for another address


def test_the_ca_files_are_private_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = JobCa.create("job")
    folder = tmp_path / "tls"
    ca.write(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {
        "ca.crt": 0o600,
        "ca.key": 0o600,
    }
    assert JobCa.read(folder) == ca
    assert JobCa.read(folder, key=False) == JobCa(ca.cert_pem, b"")
    monkeypatch.delenv("PRIMUS_TLS_DIR", raising=False)
    assert load_job_ca() is None  # no TLS folder named: the job runs without TLS
    monkeypatch.setenv("PRIMUS_TLS_DIR", str(folder))
    assert load_job_ca() == ca
    with pytest.raises(TlsError, match=r"certificate authority is missing: .*ca\.crt"):
        JobCa.read(tmp_path / "nowhere")


def test_the_secret_form_round_trips_and_is_owned() -> None:
    ca = JobCa.create("job")
    owner = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "name": "job", "uid": "u"}
    secret = tls_secret("job", ca, labels={"primus.dev/job": "job"}, owner=owner)
    assert secret["metadata"]["name"] == "job-tls"
    assert secret["metadata"]["ownerReferences"] == [owner]
    assert ca_from_secret(secret) == ca
    assert ca_from_secret(secret, key=False).key_pem == b""
