"""PrimusHook against a real job store and a real master (its control API over HTTP)."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from airflow_provider_primus.credentials import derive_token
from airflow_provider_primus.hooks.primus import PrimusError, PrimusHook
from airflow_provider_primus.master.jobs import read_token
from airflow_provider_primus.master.store import modify
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, running, until

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_sync_and_async_control_calls_on_a_running_job(job_world: JobWorld, tls: bool) -> None:
    """With TLS the hook verifies the master against the job's CA (read where it was submitted)."""
    hook = PrimusHook()  # no connection: the local backend's defaults ($PRIMUS_HOME)
    record = hook.submit_job(job_world.job(follow=True, backend={"tls": tls}), start=False)
    assert record.name == "job" and hook.get_job("job") is not None
    assert (hook.ca("job") is not None) is tls
    with running(job_world):
        hook.wait_for_master("job")
        status = hook.get_status("job")
        assert status["master"]["api"].startswith("https://" if tls else "http://")
        assert status["phase"] in ("Pending", "Running") and "data_progress" not in status
        assert asyncio.run(hook.aget_status("job"))["master"] == status["master"]
        assert hook.scale("job", "data", 2)["accepted"] is True
        assert asyncio.run(hook.ascale("job", "data", 1))["accepted"] is True
        assert hook.savepoint("job", "sp-1")["accepted"] is True
        events = hook.get_events("job")
        assert events[0]["type"] == "Submitted"
        later = asyncio.run(hook.aget_events("job", after=events[0]["seq"]))
        assert later and all(e["seq"] > events[0]["seq"] for e in later)
        assert asyncio.run(hook.astop_job("job"))["accepted"] is True
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    assert hook.test_connection()[0] is True


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_transient_errors_are_retried_then_reported(job_world: JobWorld) -> None:
    hook = PrimusHook(retries=2, backoff_s=0.01)
    hook.submit_job(job_world.job(), start=False)
    api = f"http://127.0.0.1:{_closed_port()}"  # a master that is away (restarting)
    modify(job_world.store, "job", lambda r: {"master": {"api": api}}, part="status")
    with pytest.raises(PrimusError, match="gave up after 2 retries"):
        hook.get_status("job")
    with pytest.raises(PrimusError, match="gave up after 2 retries"):
        asyncio.run(hook.aget_status("job"))
    modify(job_world.store, "job", lambda r: {}, part="status")  # no master recorded yet: also transient
    with pytest.raises(PrimusError, match="no running master"):
        hook.get_status("job")


def test_a_refused_request_is_not_retried(job_world: JobWorld) -> None:
    hook = PrimusHook(retries=3, backoff_s=5.0)  # a retry would take 5 s: the test's time shows none happened
    hook.submit_job(job_world.job(follow=True), start=False)
    with running(job_world):
        hook.wait_for_master("job")
        (job_world.home / "jobs" / "job" / "token").write_text("not-the-token")
        with pytest.raises(PrimusError, match="HTTP 401"):
            hook.get_status("job")


def test_a_connection_secret_derives_each_jobs_token(
    job_world: JobWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = {"conn_type": "primus", "password": "s3cret", "extra": {"home": str(job_world.home)}}
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_TEAM", json.dumps(conn))
    hook = PrimusHook("primus_team")
    assert hook.home == job_world.home
    hook.submit_job(job_world.job(), name="derived", start=False)
    assert read_token("derived") == derive_token("s3cret", "derived")
    assert hook.token("derived") == read_token("derived")
    with pytest.raises(Exception, match=r"isn't defined|not defined|not found"):
        _ = PrimusHook("primus_missing").settings


def test_a_yarn_connection_fills_the_jobs_kerberos_login_where_the_document_is_silent(
    job_world: JobWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = {
        "home": str(job_world.home),
        "backend": "yarn",
        "queue": "etl",
        "kerberos_principal": "etl@EXAMPLE.COM",
        "kerberos_keytab": "/etc/security/keytabs/etl.keytab",
    }
    monkeypatch.setenv("AIRFLOW_CONN_PRIMUS_YARN", json.dumps({"conn_type": "primus", "extra": extra}))
    hook = PrimusHook("primus_yarn")
    hook.submit_job(job_world.job(), name="kerberized", start=False)
    record = hook.get_job("kerberized")
    assert record is not None
    yarn = record.spec["spec"]["backend"]["yarn"]
    assert (yarn["queue"], yarn["principal"], yarn["keytab"]) == (
        "etl",
        "etl@EXAMPLE.COM",
        "/etc/security/keytabs/etl.keytab",
    )
