"""Airflow for local use: ``airflow standalone`` on loopback with SQLite and this provider's DAGs.

``airflow standalone`` binds 0.0.0.0 by default; here the API server is pinned to 127.0.0.1. The
child runs in its own process group: stopping sends SIGINT (standalone's clean shutdown path, which
stops scheduler, dag-processor, triggerer and api-server) and then kills whatever remains of the group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from airflow_provider_primus.process import parent_death_signal, stop_process_group

LOOPBACK = "127.0.0.1"


def airflow_env(home: Path, dags_folder: Path, *, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that confines Airflow to ``home`` and loopback."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # SQLite allows one writer: one worker keeps the LocalExecutor from fighting the scheduler.
            "AIRFLOW__CORE__PARALLELISM": "4",
        }
    )
    # Make the venv's `airflow` the one standalone starts for its components.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


class AirflowStandalone:
    def __init__(self, home: Path, dags_folder: Path, *, port: int = 8080, extra_env: dict[str, str] | None = None):
        self.home = Path(home)
        self.port = port
        self.env = airflow_env(self.home, Path(dags_folder), port=port, extra=extra_env)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "standalone"],
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # If the launcher is killed, standalone still gets its clean-shutdown signal.
            preexec_fn=parent_death_signal(signal.SIGINT),
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2) as resp:
                body = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return all(
            body.get(part, {}).get("status") == "healthy" for part in ("metadatabase", "scheduler", "triggerer")
        )

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"airflow standalone exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Airflow not healthy at {self.url} after {timeout_s:.0f}s")
            time.sleep(1.0)  # components come up over tens of seconds; a health poll each second is enough

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process.pid, child=self.process, first_signal=signal.SIGINT, grace_s=60)
            self.process = None
