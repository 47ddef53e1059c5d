"""The one Service a pod of the embedded cluster needs: ``kubernetes.default`` (the API server).

A real cluster's kube-proxy sends a pod's connection to the ``kubernetes`` Service's cluster IP on to
an API server. The embedded API server listens on loopback only, and there is no kube-proxy; so the
node puts the Service's cluster IP on its pods' bridge (a pod routes to it through the bridge's
gateway, see ``node.cni_conflist``) and this relay forwards what arrives there, byte for byte, to the
API server. TLS goes through untouched: the API server's certificate names that IP, and pods verify
it with the cluster's CA as in-cluster clients do anywhere. Nothing in the backend knows about it:
in-cluster configuration (``KUBERNETES_SERVICE_HOST``) works as on a real cluster.
"""

from __future__ import annotations

import contextlib
import socket
import threading

_CHUNK = 1 << 16


class TcpRelay:
    """Forward each connection accepted on ``listen`` to ``target``, both ways, until either closes."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen = listen
        self.target = target
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> TcpRelay:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(self.listen)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, name="primus-api-relay", daemon=True).start()
        return self

    def _accept(self) -> None:
        server = self._server
        while server is not None:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed by stop()
            # Dialled off the accept loop: a target slow to accept (an API server under load) holds
            # up that connection only, not every one behind it.
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10.0)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            if self._server is None:  # stopped meanwhile
                client.close()
                upstream.close()
                return
            self._open.update((client, upstream))
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):  # one side ended: end the pair
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for s in (source, sink):
                    if s in self._open:
                        self._open.discard(s)
                        s.close()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()
