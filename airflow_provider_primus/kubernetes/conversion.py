"""The PrimusJob conversion webhook: the apiserver asks it to convert stored objects between versions.

Kubernetes stores a custom resource at one version (the CRD's storage version, the newest) and serves
every version a CRD lists; when a client reads or writes another one, the apiserver POSTs a
``ConversionReview`` (apiextensions.k8s.io/v1) to the webhook the CRD names and uses the objects it
gets back. The conversion itself is the contract's (contracts/versions.py): the same functions that
``primus convert`` and every load use, so the cluster and the command line cannot disagree.

The apiserver only talks TLS to a webhook and checks the certificate against the CRD's
``caBundle``: ``serve`` takes a certificate and key (``tls.JobCa.issue`` makes them) and the CRD is
given the CA that signed them (``contracts.crd.webhook_conversion``).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.versions import convert

REVIEW_VERSION = "apiextensions.k8s.io/v1"
PATH = "/convert"
MAX_BODY = 64 << 20  # a review of a large list; the apiserver's own limit on a request is 3 MiB/object


def review(request: Mapping[str, Any]) -> dict[str, Any]:
    """A ConversionReview's response: every object at ``desiredAPIVersion``, or a failure naming why
    (the apiserver then answers the client with that message and converts nothing)."""
    body = request.get("request") or {}
    uid = body.get("uid", "")
    desired = str(body.get("desiredAPIVersion", ""))
    try:
        converted = [_convert_object(obj, desired) for obj in body.get("objects") or []]
    except SpecError as exc:
        result = {"status": "Failure", "message": f"cannot convert to {desired}: {exc}"}
        return _response(uid, [], result)
    return _response(uid, converted, {"status": "Success"})


def _convert_object(obj: Mapping[str, Any], desired: str) -> dict[str, Any]:
    """One stored object, metadata and status included: a conversion may change only apiVersion,
    spec and annotations; the apiserver refuses a response that changes anything else in metadata."""
    return convert(obj, desired)


def _response(uid: str, objects: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": REVIEW_VERSION,
        "kind": "ConversionReview",
        "response": {"uid": uid, "convertedObjects": objects, "result": result},
    }


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        """``/healthz`` for the Deployment's readiness probe."""
        if self.path == "/healthz":
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"message": f"not found; the conversion webhook serves POST {PATH}"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != PATH:
            self._reply(404, {"message": f"not found; the conversion webhook serves {PATH}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._reply(400, {"message": "a ConversionReview body is required"})
            return
        try:
            request = json.loads(self.rfile.read(length))
        except ValueError as exc:
            self._reply(400, {"message": f"not JSON: {exc}"})
            return
        if not isinstance(request, dict) or request.get("kind") != "ConversionReview":
            self._reply(400, {"message": "expected a ConversionReview"})
            return
        answer = review(request)
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.reviews += 1  # type: ignore[attr-defined]
        self._reply(200, answer)

    def _reply(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the apiserver calls on every read at another version."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    reviews = 0  # answered, for a test or a probe to see the apiserver call
    lock = threading.Lock()


class ConversionWebhook:
    """The webhook's HTTPS server: ``start`` serves on a thread (port 0 picks one), ``serve`` in the
    foreground, ``stop`` closes it."""

    def __init__(self, host: str, port: int, cert_file: Path, key_file: Path) -> None:
        self._server = _Server((host, port), _Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(cert_file), str(key_file))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="conversion-webhook", daemon=True
        )

    @property
    def reviews(self) -> int:
        """ConversionReviews answered so far."""
        return self._server.reviews

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> ConversionWebhook:
        self._thread.start()
        return self

    def serve(self) -> None:
        """In the foreground, until interrupted: what the deployed component runs."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
