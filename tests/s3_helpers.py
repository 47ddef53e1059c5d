"""Helpers of the object-store tests: a bucket per test, a byte-counting filesystem, a TCP gate.

All against the session's real SeaweedFS (``s3_server`` fixture); nothing here mocks S3.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_provider_primus.embedded.s3 import S3State

KEY_ENV = "PRIMUS_TEST_S3_KEY"
SECRET_ENV = "PRIMUS_TEST_S3_SECRET"


def admin_fs(state: S3State) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=state.access_key,
        secret_key=state.secret_key,
        region=state.region,
        scheme="http",
        endpoint_override=state.endpoint.split("://", 1)[1],
        allow_bucket_creation=True,
        allow_bucket_deletion=True,
    )


SESSION_BUCKET = "primus-tests"


def new_bucket(state: S3State, prefix: str = "t") -> str:
    """A fresh ``bucket/prefix`` root for one test. One bucket per session: SeaweedFS gives each
    bucket its own collection of volumes, and prefixes isolate tests just as well."""
    admin_fs(state).create_dir(SESSION_BUCKET)
    return f"{SESSION_BUCKET}/{prefix}-{uuid.uuid4().hex[:12]}"


def storage(state: S3State, *, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
    """A contract's ``storage`` section for the session server, credentials from the test's env."""
    return {
        "endpoint": endpoint or state.endpoint,
        "region": state.region,
        "addressing": "path",
        "credentials": {"env": {"access_key_id": KEY_ENV, "secret_access_key": SECRET_ENV}},
        **extra,
    }


def aws_connection(state: S3State) -> str:
    """The session server as an Airflow ``aws`` connection (for ``AIRFLOW_CONN_<ID>``), as users have one."""
    return json.dumps(
        {
            "conn_type": "aws",
            "login": state.access_key,
            "password": state.secret_key,
            "extra": {"endpoint_url": state.endpoint, "region_name": state.region},
        }
    )


class _CountingReader:
    """A file object over a pyarrow input file that counts the bytes actually fetched."""

    def __init__(self, inner: pa.NativeFile, counter: dict[str, int]) -> None:
        self.inner = inner
        self.counter = counter
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        data: bytes = self.inner.read(None if n is None or n < 0 else n)
        self.counter["bytes"] += len(data)
        self.counter["reads"] += 1
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        return int(self.inner.seek(pos, whence))

    def tell(self) -> int:
        return int(self.inner.tell())

    def size(self) -> int:
        return int(self.inner.size())

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        self.inner.close()


class CountingHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """Every input file opened through it counts the bytes read: proof that a footer or a row group
    is fetched with ranged reads, not the whole object."""

    def __init__(self, inner: pafs.FileSystem) -> None:
        self.inner = inner
        self.counter = {"bytes": 0, "reads": 0}

    def get_type_name(self) -> str:
        return "counting"

    def normalize_path(self, path: str) -> str:
        return path

    def equals(self, other: Any) -> bool:
        return other is self

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self.inner.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.inner.get_file_info(selector))

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_CountingReader(self.inner.open_input_file(path), self.counter), mode="r")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("read-only test filesystem")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _unsupported
    delete_file = move = copy_file = open_output_stream = open_append_stream = _unsupported


class Gate:
    """A TCP forwarder to the S3 port that can be closed (connections refused) and opened again:
    a store that is briefly unreachable, without stopping the real server."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self._stop.clear()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
        self._listener = self._thread = None

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def opened_after(gate: Gate, delay_s: float) -> Iterator[None]:
    """The gate opens ``delay_s`` after entering (a timer, not a sleep in the test) and closes on exit."""
    timer = threading.Timer(delay_s, gate.open)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        gate.close()
