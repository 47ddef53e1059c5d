"""The job's control API put on the network: where the spec says, as the job's TLS says.

It binds the spec's address (loopback unless configured), on the port a previous master served so
clients that kept the address find the new one, and serves the job's Prometheus metrics beside it
behind the same token. A job that serves TLS gets the API's certificate issued afresh from its CA for
the address clients dial.
"""

from __future__ import annotations

from pathlib import Path

from airflow_provider_primus.contracts.job import Control
from airflow_provider_primus.data.service.auth import advertised_host, bind_host
from airflow_provider_primus.master.api import ApiServer, JobControl, create_app
from airflow_provider_primus.master.metrics import JobMetrics, render
from airflow_provider_primus.tls import JobCa, write_private

__all__ = ["serve_api"]


def serve_api(
    control: JobControl,
    token: str,
    metrics: JobMetrics,
    *,
    listen: Control,
    port: int,
    ca: JobCa | None,
    tls_dir: Path,
) -> ApiServer:
    """The started API server. ``port``: the previous master's (0: the spec's, where 0 is any free
    one); ``ca``: the job's, when it serves TLS (the certificate is written into ``tls_dir``)."""
    app = create_app(control, token, metrics=lambda: render(metrics))
    host = bind_host(listen.host)
    return ApiServer(
        app,
        host,
        port or listen.port,
        tls=api_certificate(ca, tls_dir, host),
        advertise=advertised_host(host),
    ).start()


def api_certificate(ca: JobCa | None, tls_dir: Path, host: str) -> tuple[Path, Path] | None:
    """The certificate and key for the address the API serves on, written 0600 beside the CA
    (uvicorn reads files); None when the job does not serve TLS."""
    if ca is None:
        return None
    cert, key = ca.issue([advertised_host(host)])
    files = (tls_dir / "api.crt", tls_dir / "api.key")
    write_private(files[1], key)
    write_private(files[0], cert)
    return files
