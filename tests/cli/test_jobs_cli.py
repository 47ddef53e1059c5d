"""The job commands as a user runs them: real CLI processes, a real master and executors."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import timedelta

import pytest

from tests.conftest import venv_bin
from tests.master.conftest import JobWorld
from tests.training.conftest import T0

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
    # The trainer's final figures (batch_size 20), not its last periodic report before the end.
    steps = job_world.rows // 20
    assert (final["progress"]["trainer_step"], final["progress"]["trainer_rows"]) == (steps, job_world.rows)
    assert final["progress"]["trainer_metrics"]["steps"] == steps
    status = json.loads(primus("status", "job", "--json").stdout)
    assert status["phase"] == "Succeeded" and "data_progress" not in status
    text = primus("status", str(job)).stdout  # the document works as well as the name
    assert text.startswith("Succeeded:") and "trainer-0" in text and "data-0" in text
    how = status["executors"]["data-0"]["handle"]["ref"]["enforcement"]  # cgroups where writable
    assert f"limits cpu:{how['cpu']} memory:{how['memory']}" in text
    events = [json.loads(line) for line in primus("events", "job", "--json").stdout.splitlines()]
    assert [e["type"] for e in events][:2] == ["Submitted", "MasterStarted"]
    assert events[-1]["type"] == "Succeeded"
    # A master started again for the ended job (a driver pod restarted after the end) ends as the
    # job did, with nothing done: no crash loop, no new event.
    restarted = primus("master", "job", check=False)
    assert (restarted.returncode, restarted.stderr.strip()) == (
        0,
        "job 'job' already ended: Succeeded; nothing to do",
    )
    assert len(primus("events", "job", "--json").stdout.splitlines()) == len(events)
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


def test_submit_reports_a_planning_failure_at_once(job_world: JobWorld) -> None:
    hour = T0 + timedelta(hours=2)
    missing = job_world.root / "store" / hour.strftime("%Y-%m-%d") / hour.strftime("%H")
    shutil.rmtree(missing)  # the source's missing policy is 'fail'
    started = time.monotonic()
    result = primus("submit", str(job_world.job()), check=False)
    assert time.monotonic() - started < 30  # not the 60 s wait for a master that never comes up
    assert result.returncode == 1, result.stderr
    assert f"error: job 'job' Failed: planning source 'history' (file://{job_world.root}/store) failed" in (
        result.stderr
    )
    assert str(missing) in result.stderr and "Traceback" not in result.stderr
    status = json.loads(primus("status", "job", "--json").stdout)
    assert status["phase"] == "Failed" and str(missing) in status["message"]
    assert "Traceback" not in status["message"]


def test_the_operator_verbs_against_a_live_job(job_world: JobWorld) -> None:
    from airflow_provider_primus.master.jobs import wait_for

    job = job_world.job(follow=True)
    assert primus("submit", str(job), "--label", "team=ads").stdout.strip() == "job"
    listed = [
        json.loads(line) for line in primus("jobs", "--json", "--label", "team=ads").stdout.splitlines()
    ]
    assert [r["name"] for r in listed] == ["job"] and listed[0]["labels"] == {"team": "ads"}
    assert primus("jobs", "--json", "--label", "team=other").stdout == ""
    assert "job" in primus("jobs").stdout

    wait_for(job_world.store, "job", lambda r: (r.status.get("progress") or {}).get("trainer_step"), 120)
    resized = json.loads(
        primus("resize", "job", "--role", "data", "--cpu", "500m", "--memory", "768Mi").stdout
    )
    assert list(resized["resized"]) == ["data-0"]
    record = wait_for(
        job_world.store,
        "job",
        lambda r: r.status["executors"]["data-0"]["handle"]["allotment"] == {"cpu": 0.5, "memory": 768 << 20},
        60,
    )
    assert record.status["executors"]["data-0"]["restarts"] == 0  # in place
    bad = primus("resize", "job", "--role", "data", "--memory", "lots", check=False)
    assert bad.returncode == 1 and "512Mi" in bad.stderr

    done = json.loads(primus("savepoint", "job", "--id", "before-upgrade", "--wait", "120").stdout)
    assert done["id"] == "before-upgrade" and done["state"] == "done" and done["checkpoint"]

    assert json.loads(primus("suspend", "job").stdout)["accepted"] is True
    wait_for(job_world.store, "job", lambda r: r.status.get("phase") == "Suspended", 60)
    assert json.loads(primus("resume", "job").stdout)["accepted"] is True
    wait_for(job_world.store, "job", lambda r: r.status.get("phase") == "Running", 60)
    primus("stop", "job", "--wait")
    assert [r["phase"] for r in map(json.loads, primus("jobs", "--json").stdout.splitlines())] == ["Stopped"]


def test_a_bad_history_interval_stops_the_master_before_the_job_starts(
    job_world: JobWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRIMUS_HISTORY_EVERY_S", "soon")
    result = primus("run", str(job_world.job()), check=False)
    assert result.returncode == 2
    assert "PRIMUS_HISTORY_EVERY_S='soon': must be a number of seconds above 0" in result.stderr
    monkeypatch.delenv("PRIMUS_HISTORY_EVERY_S")
    final = json.loads(primus("run", str(job_world.job()), "--json").stdout)  # nothing was lost
    assert final["phase"] == "Succeeded" and final["progress"]["acked_rows"] == job_world.rows


def test_a_window_of_a_named_source_joins_a_running_job(job_world: JobWorld) -> None:
    """``primus window``: the window of the named files source joins and is waited for; a source the
    job does not read exits 1 naming it."""
    from tests.master.test_sources import RECENT_ROWS, several_sources, write_recent

    several_sources(job_world, None, None)
    write_recent(job_world.root, range(1, 2))
    primus("submit", str(job_world.job(follow=True)))
    start, end = (T0 + timedelta(hours=1)).isoformat(), (T0 + timedelta(hours=2)).isoformat()
    bad = primus("window", "job", "--start", start, "--end", end, "--source", "recnt", check=False)
    assert bad.returncode == 1 and "no files source named 'recnt'" in bad.stderr, bad.stderr
    unnamed = primus("window", "job", "--start", start, "--end", end, check=False)
    assert unnamed.returncode == 1 and "name the files source this window belongs to" in unnamed.stderr
    window = json.loads(
        primus("window", "job", "--start", start, "--end", end, "--source", "recent", "--wait", "120").stdout
    )
    assert (window["source"], window["rows"], window["consumed"]) == ("recent", RECENT_ROWS, True)
    assert window["sources"] == ["recent"]
    primus("stop", "job", "--wait")
