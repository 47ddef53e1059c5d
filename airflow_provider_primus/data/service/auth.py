"""Per-job token authentication and TLS for every Flight server of a job (dispatcher and data
executors), and the one way their clients connect.

The token travels in the ``authorization`` header of each call, is compared in constant time and is
never logged; how it is made and how it reaches a process (the environment or a file, never a command
line that ``ps`` would show) is ``credentials.py``'s. With the job's CA (``tls.py``) a server issues
itself a certificate for the address it serves on and listens on ``grpc+tls://``; a client of a
``grpc+tls://`` location trusts the job's CA only, so a server of another job, or a man in the
middle, fails the handshake before any token is sent.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from pyarrow import flight

from airflow_provider_primus.contracts.job import is_loopback
from airflow_provider_primus.tls import ADVERTISE_ENV, TLS_DIR_ENV, JobCa, TlsError, load_job_ca

TLS_SCHEME = "grpc+tls"


def bind_host(host: str) -> str:
    """Where a server of the job binds: ``host``, except that in a pod (``$PRIMUS_ADVERTISE_HOST``
    set from the downward API) the loopback default means the pod's own address, which its peers
    can reach, rather than every interface. A wildcard still binds everywhere: only when asked."""
    pod = os.environ.get(ADVERTISE_ENV)
    return pod if pod and is_loopback(host) else host


def advertised_host(host: str) -> str:
    """The address peers dial for a server bound to ``host``."""
    if host in ("0.0.0.0", "::", "") and os.environ.get(ADVERTISE_ENV):
        return os.environ[ADVERTISE_ENV]
    return host


def advertised(host: str, port: int, tls: bool = False) -> str:
    """The location peers dial for a server bound to ``host``."""
    return f"{TLS_SCHEME if tls else 'grpc'}://{advertised_host(host)}:{port}"


def server_args(host: str, port: int, token: str, ca: JobCa | None) -> dict[str, Any]:
    """``FlightServerBase`` arguments for a server of the job: token middleware always, and with the
    job's CA a certificate naming the address peers dial (``advertised_host``), nothing more."""
    args: dict[str, Any] = {"middleware": {"auth": TokenAuthFactory(token)}}
    if ca is None:
        args["location"] = f"grpc://{host}:{port}"
        return args
    cert, key = ca.issue([advertised_host(host)])
    args["location"] = f"{TLS_SCHEME}://{host}:{port}"
    args["tls_certificates"] = [flight.CertKeyPair(cert=cert, key=key)]
    return args


def flight_client(location: str, ca: JobCa | None = None) -> flight.FlightClient:
    """A client of one of the job's Flight servers. A ``grpc+tls://`` location is verified against
    the job's CA (``ca``, else the one ``$PRIMUS_TLS_DIR`` names) and nothing else; without one the
    call is refused here, not sent in the clear or to a server nobody vouched for."""
    if not location.startswith(f"{TLS_SCHEME}://"):
        return flight.FlightClient(location)
    root = ca or load_job_ca(key=False)
    if root is None:
        raise TlsError(
            f"{location} serves TLS but this process has no CA of the job to verify it "
            f"(set {TLS_DIR_ENV} to the job's TLS folder)"
        )
    return flight.FlightClient(location, tls_root_certs=root.cert_pem)


HEADER = "authorization"


class _TokenMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    pass


class TokenAuthFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = f"Bearer {token}".encode()

    def start_call(self, info: Any, headers: dict[str, list[str | bytes]]) -> _TokenMiddleware:
        values = headers.get(HEADER) or []
        first = values[0] if values else b""
        presented = first.encode() if isinstance(first, str) else first
        if not hmac.compare_digest(presented, self._expected):
            raise flight.FlightUnauthenticatedError("missing or wrong job token")
        return _TokenMiddleware()


def call_options(token: str, timeout_s: float | None = None) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(
        headers=[(HEADER.encode(), f"Bearer {token}".encode())], timeout=timeout_s
    )
