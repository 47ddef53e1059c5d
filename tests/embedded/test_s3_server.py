"""The embedded S3 server (SeaweedFS): loopback only, telemetry off, the secret kept out of reprs."""

from __future__ import annotations

import psutil
import pytest

from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.embedded.s3.binary import binary_path, build_stamp, ensure_seaweedfs

pytestmark = pytest.mark.s3


def test_the_server_listens_on_loopback_only_with_telemetry_off(s3_server: S3State) -> None:
    proc = psutil.Process(s3_server.pid)
    assert "-master.telemetry=false" in proc.cmdline()
    listening = [c.laddr for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening, "the server listens somewhere"
    assert {addr.ip for addr in listening} == {"127.0.0.1"}, listening
    assert s3_server.s3_port in {addr.port for addr in listening}


def test_the_state_never_shows_the_secret(s3_server: S3State) -> None:
    assert s3_server.secret_key not in repr(s3_server)


def test_a_stamped_binary_is_returned_without_go(s3_server: S3State, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # a rebuild would fail: the stamp alone must answer
    weed = ensure_seaweedfs()
    assert weed == binary_path()
    assert (weed.parent.parent / "stamp").read_text().strip() == build_stamp()
