"""The job commands as a user runs them: real CLI processes, a real master and executors."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import venv_bin
from tests.master.conftest import JobWorld

pytestmark = pytest.mark.timeout(240)


def primus(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [venv_bin("primus"), *args], check=False, capture_output=True, text=True, timeout=200
    )
    if check and result.returncode != 0:
        raise AssertionError(f"primus {' '.join(args)}: exit {result.returncode}\n{result.stderr}")
    return result


def test_run_in_the_foreground_then_status_and_events(job_world: JobWorld) -> None:
    job = job_world.job()
    result = primus("run", str(job), "--quiet")
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final["phase"] == "Succeeded" and final["progress"]["acked_rows"] == job_world.rows
    status = json.loads(primus("status", "job", "--json").stdout)
    assert status["phase"] == "Succeeded" and "data_progress" not in status
    text = primus("status", str(job)).stdout  # the document works as well as the name
    assert text.startswith("Succeeded:") and "trainer-0" in text and "data-0" in text
    events = [json.loads(line) for line in primus("events", "job", "--json").stdout.splitlines()]
    assert [e["type"] for e in events][:2] == ["Submitted", "MasterStarted"]
    assert events[-1]["type"] == "Succeeded"
    again = primus("run", str(job), check=False)
    assert again.returncode == 2 and "--replace" in again.stderr
    assert (
        json.loads(primus("run", str(job), "--quiet", "--replace").stdout.splitlines()[-1])["phase"]
        == "Succeeded"
    )


def test_submit_scale_and_stop_a_background_job(job_world: JobWorld) -> None:
    job = job_world.job(follow=True)  # an open job: it runs until stopped
    assert primus("submit", str(job), "--label", "team=ads").stdout.strip() == "job"
    scaled = json.loads(primus("scale", "job", "--role", "data", "--replicas", "2").stdout)
    assert scaled["accepted"] is True
    stopped = primus("stop", "job", "--wait")
    assert json.loads(stopped.stdout)["stop"] == "requested"
    status = json.loads(primus("status", "job", "--json").stdout)
    assert status["phase"] == "Stopped"
    types = [json.loads(line)["type"] for line in primus("events", "job", "--json").stdout.splitlines()]
    assert "ScaleRequested" in types and "Stopped" in types
    assert all(e["state"] != "running" for e in status["executors"].values())


def test_invalid_job_is_refused_with_the_field(job_world: JobWorld) -> None:
    job = job_world.job(rols={})
    result = primus("run", str(job), check=False)
    assert result.returncode == 2
    assert "spec.rols: unknown field; did you mean 'roles'?" in result.stderr
