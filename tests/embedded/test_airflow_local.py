"""The demo's Airflow: real components on loopback, the provider's DAGs visible through the API."""

from __future__ import annotations

import ipaddress
import json
import stat
import time
import urllib.request
from pathlib import Path

import psutil

from airflow_provider_primus.embedded.airflow_local import COMPONENTS, AirflowLocal
from airflow_provider_primus.embedded.kafka.broker import free_port
from airflow_provider_primus.process import pid_alive
from tests.conftest import REPO


def api(url: str, token: str | None = None, body: dict | None = None) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def listening_addresses(pids: list[int]) -> set[str]:
    found = set()
    for pid in pids:
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            for conn in p.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    ip = ipaddress.ip_address(conn.laddr.ip)
                    found.add(str(getattr(ip, "ipv4_mapped", None) or ip))
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private(airflow: AirflowLocal, password: str) -> None:
    """The admin password, and the API server's log that prints it, are the owner's alone."""
    assert mode(airflow.home) == 0o700 and mode(airflow.log_dir) == 0o700
    assert mode(airflow.password_file) == 0o600
    logs = sorted(airflow.log_dir.iterdir())
    assert [p.name for p in logs] == sorted(f"{name}.log" for name in COMPONENTS)
    assert {p.name: mode(p) for p in logs} == {p.name: 0o600 for p in logs}
    assert password in (airflow.log_dir / "api-server.log").read_text()  # why the log is private


def test_local_airflow_keeps_an_earlier_runs_secrets_private(tmp_path: Path) -> None:
    """A home and files left world-readable by an earlier run are made private at start."""
    airflow = AirflowLocal(tmp_path / "airflow", REPO / "dags", port=free_port())
    airflow.log_dir.mkdir(parents=True)
    airflow.home.chmod(0o755)
    airflow.log_dir.chmod(0o755)
    for path in (airflow.password_file, airflow.log_dir / "api-server.log"):
        path.write_text("{}" if path == airflow.password_file else "")
        path.chmod(0o644)
    airflow.start(components=())  # migrates, fixes the directories and the password file
    airflow.start_component("api-server")
    try:
        assert mode(airflow.home) == 0o700 and mode(airflow.log_dir) == 0o700
        assert mode(airflow.password_file) == 0o600
        assert mode(airflow.log_dir / "api-server.log") == 0o600
    finally:
        airflow.stop()


def test_local_airflow_serves_provider_dags_on_loopback_and_stops_cleanly(tmp_path: Path) -> None:
    airflow = AirflowLocal(tmp_path / "airflow", REPO / "dags", port=free_port())
    airflow.start()
    pids = [p.pid for p in airflow.processes.values()]
    try:
        airflow.wait_ready(timeout_s=240)
        password = json.loads(airflow.password_file.read_text())["admin"]
        token = api(f"{airflow.url}/auth/token", body={"username": "admin", "password": password})[
            "access_token"
        ]
        deadline = time.monotonic() + 120
        while "primus_worker_check" not in {
            d["dag_id"] for d in api(f"{airflow.url}/api/v2/dags", token)["dags"]
        }:
            assert time.monotonic() < deadline, "the dag-processor never serialized the provider's DAG"
            time.sleep(1)  # parsing happens in another process; the API is the only way to see it
        assert listening_addresses(pids) == {"127.0.0.1"}
        assert_private(airflow, password)
    finally:
        all_pids = pids + [
            c.pid for pid in pids if pid_alive(pid) for c in psutil.Process(pid).children(True)
        ]
        airflow.stop()
    assert not [pid for pid in all_pids if pid_alive(pid)]
