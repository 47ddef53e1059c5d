"""The job page's charts in a real browser after Airflow's API server restarts: the same past.

A real Airflow API server (embedded/airflow_local.py, loopback) serves the plugin while a real job
runs to completion through ``primus run`` (a master, a data executor and a trainer, all processes),
its master keeping a point a second in the job's durable history. Chromium loads the job's page and
reads every chart's points (each point's tooltip: series, value and time); the API server is
stopped and started again, and the reloaded page must show the same points. Had the charts drawn
only what the API server held in memory, the restarted one would show the job's final status alone.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_provider_primus.embedded.airflow_local import AirflowLocal
from airflow_provider_primus.embedded.kafka.broker import free_port
from airflow_provider_primus.master.history import EVERY_S_ENV
from tests.browser import evaluate
from tests.conftest import REPO, venv_bin
from tests.master.conftest import JobWorld, job_world

pytestmark = pytest.mark.timeout(900)
__all__ = ["job_world"]  # the files-only world of the master tests (a fixture)

# Every chart of the page: its title and its points' tooltips ("series: value at HH:MM:SS UTC").
CHART_POINTS = """
Array.from(document.querySelectorAll('svg.chart')).map(svg => [
  svg.getAttribute('aria-label'),
  Array.from(svg.querySelectorAll('circle > title')).map(t => t.textContent),
])
"""


def token(airflow: AirflowLocal) -> str:
    """An Airflow JWT for the admin user, as the UI holds after logging in."""
    password = json.loads(airflow.password_file.read_text())["admin"]
    response = httpx.post(
        f"{airflow.url}/auth/token", json={"username": "admin", "password": password}, timeout=10.0
    )
    response.raise_for_status()
    value: str = response.json()["access_token"]
    return value


def serving(airflow: AirflowLocal, timeout_s: float = 240.0) -> str:
    """Wait until the API server answers the plugin's job list; a fresh token for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        if airflow.exited():
            raise RuntimeError(f"the API server exited; see {airflow.log_dir}")
        try:
            jwt = token(airflow)
            page = httpx.get(
                f"{airflow.url}/primus/api/jobs", headers={"Authorization": f"Bearer {jwt}"}, timeout=10.0
            )
            if page.status_code == 200:
                return jwt
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass  # not listening yet, or the password file not written yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API server did not serve the plugin within {timeout_s:.0f}s")
        time.sleep(0.5)  # a starting server has no event to await; it is polled like wait_ready does


def chart_points(url: str, jwt: str, shot: Path) -> dict[str, list[str]]:
    found: list[list[Any]] = evaluate(url, jwt, shot, CHART_POINTS)
    return {str(title): list(points) for title, points in found}


def test_the_charts_show_the_same_past_after_the_api_server_restarts(
    job_world: JobWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EVERY_S_ENV, "1")  # the master's history: a point a second for a short job
    airflow = AirflowLocal(tmp_path / "airflow", REPO / "dags", port=free_port())
    airflow.start(components=("api-server",))
    try:
        jwt = serving(airflow)
        url = f"{airflow.url}/primus/jobs/job"
        run = subprocess.run(
            [venv_bin("primus"), "run", str(job_world.job()), "--json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads(run.stdout)["phase"] == "Succeeded"
        durable = job_world.store.get("job").status["history"]
        assert len(durable) >= 4, durable  # the run lasted seconds: several points, the end among them

        before = chart_points(url, jwt, tmp_path / "before-restart.png")
        throughput = before["Throughput (rows/s)"]
        assert sum(t.startswith("acked rows/s:") for t in throughput) >= 3, before
        assert before["CPU utilisation per executor (share of allotment)"], before

        airflow.stop_component("api-server")
        airflow.start_component("api-server")
        jwt = serving(airflow)
        after = chart_points(url, jwt, tmp_path / "after-restart.png")
        assert after == before
    finally:
        airflow.stop()
