"""Airflow for local use: the four components of ``airflow standalone`` on loopback, SQLite, and this
provider's DAGs.

We start the components ourselves instead of calling ``airflow standalone`` because standalone
binds the API server to 0.0.0.0 by default and starts the scheduler's and triggerer's log servers on
all interfaces with no way to configure their host. Here the API server is pinned to 127.0.0.1 and
the log servers are skipped (``--skip-serve-logs``): with the LocalExecutor the API server reads
task logs straight from ``$AIRFLOW_HOME/logs``. Each component runs in its own process group, so
stopping it also stops the task processes it forked.
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
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

from airflow_provider_primus.process import stop_process_group, tied_to_launcher

LOOPBACK = "127.0.0.1"
PRIVATE_DIR, PRIVATE_FILE, PRIVATE_UMASK = 0o700, 0o600, 0o077
COMPONENTS: dict[str, list[str]] = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "api-server": ["api-server", "--host", LOOPBACK],
}


def airflow_env(
    home: Path, dags_folder: Path, *, port: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment that confines Airflow to ``home`` and loopback."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # SQLite has one writer at a time; wait for the lock (30 s) instead of failing after 5 s
            # while the scheduler writes, e.g. when a CLI command creates a backfill's runs.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=30",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            # SQLite allows one writer at a time: keep the LocalExecutor small.
            "AIRFLOW__CORE__PARALLELISM": "4",
            # The streaming trainer waits for its job's life: in the triggerer, not in a worker slot.
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        }
    )
    # The venv's `airflow`, whatever PATH the caller had.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


class AirflowLocal:
    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        *,
        port: int = 8080,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = Path(home)
        self.port = port
        self.env = airflow_env(self.home, Path(dags_folder), port=port, extra=extra_env)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    @property
    def log_dir(self) -> Path:
        return self.home / "components"

    def _airflow(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).parent / "airflow"), *args]

    def migrate(self) -> None:
        self.home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        # The home holds the admin password file, airflow.cfg's generated secret keys and logs that
        # print the password: owner only, also when it was made by an earlier, laxer run.
        self.home.chmod(PRIVATE_DIR)
        proc = subprocess.run(
            self._airflow("db", "migrate"),
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            umask=PRIVATE_UMASK,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")

    def start(self, components: Iterable[str] = tuple(COMPONENTS)) -> None:
        """Migrate the DB and start ``components`` (all four by default; ``start_component`` adds one
        later — e.g. the scheduler after a CLI command that must not race its SQLite writes)."""
        self.migrate()
        self.log_dir.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        self.log_dir.chmod(PRIVATE_DIR)
        if self.password_file.exists():  # written by an earlier run, perhaps before this was private
            self.password_file.chmod(PRIVATE_FILE)
        for name in components:
            self.start_component(name)

    def start_component(self, name: str) -> None:
        # The API server prints the generated admin password to its log on first start.
        fd = os.open(self.log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
        os.fchmod(fd, PRIVATE_FILE)  # a log left by an earlier run with a wider mode
        with open(fd, "ab") as log:
            self.processes[name] = subprocess.Popen(
                tied_to_launcher(self._airflow(*COMPONENTS[name])),
                env=self.env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # What Airflow writes itself (the password file, task logs) is owner-only too.
                umask=PRIVATE_UMASK,
            )

    def stop_component(self, name: str) -> None:
        """Stop one component (and the processes it forked); ``start_component`` starts it again,
        e.g. the API server, to show what a restart keeps."""
        proc = self.processes.pop(name)
        stop_process_group(proc.pid, child=proc, first_signal=signal.SIGTERM, grace_s=30)

    def exited(self) -> list[str]:
        return [name for name, proc in self.processes.items() if proc.poll() is not None]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2) as resp:
                body = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((body.get(part) or {}).get("status") == "healthy" for part in parts)

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if dead := self.exited():
                raise RuntimeError(f"Airflow component(s) exited: {dead}; see {self.log_dir}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Airflow not healthy at {self.url} after {timeout_s:.0f}s")
            time.sleep(1.0)  # components come up over tens of seconds; one health poll a second

    def stop(self) -> None:
        with ExitStack() as stack:  # stop every component even if one stop raises
            for proc in self.processes.values():
                stack.callback(
                    stop_process_group, proc.pid, child=proc, first_signal=signal.SIGTERM, grace_s=30
                )
        self.processes.clear()
