"""A job store lost or unwritable under a running job: the job goes on, and its readers are told.

Real master, real executor processes, the real `primus status` in another process: a reader that
does not share the master's open connection is what an Airflow sensor is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.store import SqliteJobStore
from tests.master.conftest import JobWorld
from tests.master.test_master import (
    SLOW_DATA,
    assert_exactly_once,
    ended,
    event_types,
    running,
    slowed,
    until,
)

pytestmark = pytest.mark.timeout(240)


def primus_status(world: JobWorld, *, json_out: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "airflow_provider_primus.cli.main", "status", "job"]
    env = {**os.environ, "PRIMUS_HOME": str(world.home)}
    command += ["--json"] if json_out else []
    return subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=60)


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not seen within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def store_files(world: JobWorld) -> list[str]:
    path = world.home / "jobs.sqlite"
    return [str(path), f"{path}-wal", f"{path}-shm"]


def test_a_deleted_store_is_recreated_and_readers_follow_the_job_to_its_end(job_world: JobWorld) -> None:
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            for name in store_files(job_world):
                Path(name).unlink(missing_ok=True)
            # Another process, as `primus status` or an Airflow sensor is: before the fix it answered
            # "no job named 'job'" for the rest of the run (the master wrote into the unlinked file).
            eventually(lambda: primus_status(job_world).returncode == 0, "`primus status job` finds the job")
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert "StoreRecreated" in event_types(job_world)
    [recreated] = [e for e in job_world.store.events("job") if e.type == "StoreRecreated"]
    assert "was deleted while in use" in recreated.message
    # What happened before the deletion is still there (copied from the open file).
    assert {"Submitted", "MasterStarted", "ExecutorLaunched", "Succeeded"} <= set(event_types(job_world))
    fresh = SqliteJobStore(job_world.home / "jobs.sqlite")
    assert fresh.get("job").status["phase"] == "Succeeded"
    fresh.close()
    assert_exactly_once(job_world)


def test_an_unwritable_store_makes_the_status_say_it_is_stale_and_why(job_world: JobWorld) -> None:
    files = store_files(job_world)
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            if subprocess.run(["chattr", "+i", *files], check=False, capture_output=True).returncode != 0:
                pytest.skip("chattr +i is not supported on this file system")
            try:
                seen: dict[str, str] = {}

                def stale() -> bool:
                    out = primus_status(job_world, json_out=True)
                    seen["stale"] = json.loads(out.stdout).get("stale", "") if out.returncode == 0 else ""
                    return bool(seen["stale"])

                eventually(stale, "`primus status` says the status is stale")
                assert seen["stale"].startswith("status is stale since ")
                assert "because the master cannot record it" in seen["stale"]
                assert "disk I/O error" in seen["stale"] or "readonly" in seen["stale"]
                text = primus_status(job_world).stdout
                assert "warning: status is stale since" in text
            finally:
                subprocess.run(["chattr", "-i", *files], check=True)
            eventually(lambda: "stale" not in primus_status(job_world).stdout, "the status is current again")
        record = until(job_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    [recovered] = [e for e in job_world.store.events("job") if e.type == "StoreRecovered"]
    assert "current again after" in recovered.message
    assert not (job_world.home / "jobs.sqlite.health" / "job.json").exists()
    assert_exactly_once(job_world)
