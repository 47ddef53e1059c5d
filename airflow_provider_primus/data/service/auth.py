"""Per-job token authentication for every Flight server of a job (dispatcher and data executors).

The token travels in the ``authorization`` header of each call, is compared in constant time and is
never logged; how it is made and how it reaches a process (the environment or a file, never a command
line that ``ps`` would show) is ``credentials.py``'s.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from pyarrow import flight

# A server bound to every interface (``0.0.0.0`` in a pod) tells its peers this address instead:
# the Kubernetes backend sets it to the pod's IP through the downward API.
ADVERTISE_ENV = "PRIMUS_ADVERTISE_HOST"


def advertised_host(host: str) -> str:
    """The address peers dial for a server bound to ``host``."""
    if host in ("0.0.0.0", "::", "") and os.environ.get(ADVERTISE_ENV):
        return os.environ[ADVERTISE_ENV]
    return host


def advertised(host: str, port: int) -> str:
    """The location peers dial for a server bound to ``host``."""
    return f"grpc://{advertised_host(host)}:{port}"


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
