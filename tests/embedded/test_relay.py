"""The embedded node's TCP relay (pods to the loopback API server and object store): bytes both
ways, connections independent of each other, all of them closed by ``stop``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from airflow_provider_primus.embedded.kube.cluster import free_port
from airflow_provider_primus.embedded.kube.relay import TcpRelay


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A loopback echo server."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    server.close()


def _roundtrip(address: tuple[str, int], payload: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_bytes_go_both_ways_on_many_connections_at_once(echo: tuple[str, int]) -> None:
    relay = TcpRelay(("127.0.0.1", free_port()), echo).start()
    try:
        payloads = [bytes([i]) * (200_000 + i) for i in range(16)]
        results: dict[int, bytes] = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, _roundtrip(relay.listen, payloads[i])))
            for i in range(len(payloads))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert [results.get(i) == p for i, p in enumerate(payloads)] == [True] * len(payloads)
    finally:
        relay.stop()


def test_stop_ends_open_connections_and_the_listener(echo: tuple[str, int]) -> None:
    relay = TcpRelay(("127.0.0.1", free_port()), echo).start()
    conn = socket.create_connection(relay.listen, timeout=10)
    conn.sendall(b"ping")
    assert conn.recv(4) == b"ping"
    relay.stop()
    assert conn.recv(4) == b""  # the relay closed its side
    conn.close()
    with pytest.raises(OSError):
        socket.create_connection(relay.listen, timeout=2)
