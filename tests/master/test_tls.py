"""A job with TLS: its master (a process of its own, as `primus submit` starts it) and executors
serve TLS from the job's CA; every client without the token, without the job's CA, speaking plain
TCP or trusting another job's CA is refused with a message that says which; and the job's processes
listen on nothing but the address the job names."""

from __future__ import annotations

import contextlib
import ipaddress
import stat
from collections.abc import Iterator
from typing import Any

import psutil
import pyarrow as pa
import pytest
from pyarrow import flight

from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.data.service.auth import flight_client
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.master.client import ControlClient, ControlError
from airflow_provider_primus.master.jobs import (
    job_paths,
    read_job_ca,
    read_token,
    start_master,
    submit,
    wait_for,
)
from airflow_provider_primus.master.store import JobRecord, modify
from airflow_provider_primus.tls import TLS_DIR_ENV, JobCa, TlsError
from tests.master.conftest import JobWorld

pytestmark = pytest.mark.timeout(300)

HELD: dict[str, Any] = {
    "backend": {"tls": True},
    "data_service": {"batch_rows": 500, "window": 2},
    "roles": {
        "data": {"replicas": {"min": 1}, "resources": {"cpu": "500m", "memory": "1Gi"}},
        "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
    },
}


def until(world: JobWorld, predicate: Any, timeout_s: float = 150) -> JobRecord:
    return wait_for(world.store, "job", predicate, timeout_s)


def _step(record: JobRecord) -> int:
    return int(record.status.get("progress", {}).get("trainer_step") or 0)


@pytest.fixture
def tls_job(job_world: JobWorld, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobRecord]:
    """The job mid-pass: its trainer slowed to a tenth of a core (an in-place resize) so the test
    acts while every server is up; the core given back and the job run to its end afterwards."""
    monkeypatch.delenv(TLS_DIR_ENV, raising=False)  # this process is no member of the job
    submit(job_world.job(**HELD), store=job_world.store)
    start_master("job")
    started = until(job_world, lambda r: _step(r) > 0 or r.status.get("phase") in TERMINAL)
    assert started.status.get("phase") == "Running", started.status.get("message")
    modify(
        job_world.store,
        "job",
        lambda r: {**r.desired, "resize": {"trainer-0": {"cpu": 0.1}}, "resize_gen": 1},
    )
    record = until(
        job_world,
        lambda r: (
            r.status["executors"]["trainer-0"]["handle"]["allotment"]["cpu"] == 0.1
            or r.status.get("phase") in TERMINAL
        ),
    )
    try:
        yield record
    finally:
        if job_world.store.get("job").status.get("phase") not in TERMINAL:
            modify(job_world.store, "job", lambda r: {**r.desired, "stop": True})
            until(job_world, lambda r: r.status.get("phase") in TERMINAL, 60)


def _full_speed(world: JobWorld) -> None:
    modify(
        world.store, "job", lambda r: {**r.desired, "resize": {"trainer-0": {"cpu": 1.0}}, "resize_gen": 2}
    )


def test_the_job_ca_is_private_and_its_own(job_world: JobWorld) -> None:
    submit(job_world.job(name="a", backend={"tls": True}), store=job_world.store)
    submit(job_world.job(name="b", backend={"tls": True}), store=job_world.store)
    submit(job_world.job(name="plain"), store=job_world.store)
    folder = job_paths("a").tls
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("ca.crt", "ca.key"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert read_job_ca("a") != read_job_ca("b")  # one CA per job
    assert read_job_ca("plain") is None and not job_paths("plain").tls.exists()  # loopback: off


def test_a_tls_job_refuses_every_stranger_and_trains_exactly(job_world: JobWorld, tls_job: JobRecord) -> None:
    master = tls_job.status["master"]
    url, token, ca = master["api"], read_token("job"), read_job_ca("job")
    assert url.startswith("https://127.0.0.1:") and ca is not None
    other = JobCa.create("another-job")

    # The control API: the job's CA and token, and nothing less.
    assert ControlClient(url, token, ca=ca).job_status().phase == "Running"
    with pytest.raises(ControlError, match="HTTP 401: missing or wrong job token"):
        ControlClient(url, "", ca=ca).status()
    with pytest.raises(ControlError, match="HTTP 401: missing or wrong job token"):
        ControlClient(url, "not-the-token", ca=ca).status()
    with pytest.raises(ControlError, match="serves TLS but no CA certificate of the job"):
        ControlClient(url, token).status()
    with pytest.raises(ControlError, match="does it serve TLS"):
        ControlClient(url.replace("https://", "http://"), token).status()
    with pytest.raises(ControlError, match="certificate that the job's CA did not issue"):
        ControlClient(url, token, ca=other.cert_pem).status()

    # The dispatcher and the data executors (Flight): the same four refusals.
    dispatcher = master["dispatcher"]
    assert dispatcher.startswith("grpc+tls://127.0.0.1:")
    job_ca = JobCa(ca, b"")
    status = DispatcherClient(dispatcher, token, ca=job_ca).status()
    executors = [e["location"] for e in status["executors"].values()]
    assert executors and all(loc.startswith("grpc+tls://127.0.0.1:") for loc in executors)
    for location in (dispatcher, executors[0]):
        good = flight_client(location, job_ca)
        _reach(good, token)
        for wrong in ("", "not-the-token"):
            with pytest.raises(flight.FlightUnauthenticatedError, match="missing or wrong job token"):
                good.list_actions(_options(wrong))
        with pytest.raises(TlsError, match="serves TLS but this process has no CA of the job"):
            flight_client(location)
        plain = flight.FlightClient(location.replace("grpc+tls://", "grpc://"))
        with pytest.raises(flight.FlightUnavailableError):
            plain.list_actions(_options(token, 5))
        stranger = flight_client(location, other)
        with pytest.raises(flight.FlightUnavailableError, match=r"(?i)handshake|certificate|ssl"):
            stranger.list_actions(_options(token, 5))

    # Nothing listens beyond the address the job was told to use (127.0.0.1, its default).
    listening = _listening([master["pid"], *_executor_pids(tls_job)])
    assert listening, "the probe found no listening socket at all"
    ports = {port for _, port in listening}
    assert {master["api_port"], master["dispatcher_port"]} <= ports
    assert {_ipv4(ip) for ip, _ in listening} == {"127.0.0.1"}, listening

    # And the job itself, over TLS end to end, trains every row once.
    _full_speed(job_world)
    record = until(job_world, lambda r: r.status.get("phase") in TERMINAL, 200)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    rows = job_world.trace_rows()
    assert sorted(rows) == list(range(job_world.rows))


def _options(token: str, timeout_s: float | None = None) -> flight.FlightCallOptions:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return flight.FlightCallOptions(headers=headers, timeout=timeout_s)


def _ipv4(ip: str) -> str:
    """gRPC listens on an IPv6 socket bound to the v4-mapped address (``::ffff:127.0.0.1``): the
    same one address."""
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def _reach(client: flight.FlightClient, token: str) -> None:
    """A call that gets past the handshake and the token check (a data executor lists no actions:
    its NotImplementedError comes from the server itself)."""
    with contextlib.suppress(pa.ArrowNotImplementedError):
        client.list_actions(_options(token, 10))


def _executor_pids(record: JobRecord) -> list[int]:
    return [int(e["handle"]["ref"]["pid"]) for e in record.status["executors"].values()]


def _listening(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of these processes and their children: the
    kernel's own table (psutil reads /proc/net/tcp and tcp6 and matches the processes' inodes)."""
    found = []
    procs = []
    for pid in pids:
        proc = psutil.Process(pid)
        procs += [proc, *proc.children(recursive=True)]
    for proc in procs:
        for conn in proc.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.append((conn.laddr.ip, conn.laddr.port))
    return found
