"""A TLS job on YARN: its CA reaches the containers as private LocalResources (not the master's
folder, not a command line), the data executors serve ``grpc+tls`` and a client without the job's
CA is refused."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from pyarrow import flight

from airflow_provider_primus.data.service.auth import flight_client
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.master.jobs import read_job_ca, submit
from airflow_provider_primus.tls import CA_FILE, CA_KEY_FILE, TLS_DIR_ENV, JobCa, TlsError, verify_context
from airflow_provider_primus.yarn.am import AmClient, AmError, AmUnreachable
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended, executor
from tests.master.test_tls import _options, _reach
from tests.yarn.test_job import YARN_JOB, container_process, running, serving, until

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]


def test_a_tls_job_ships_its_ca_to_the_containers_and_refuses_strangers(
    yarn_world: JobWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TLS_DIR_ENV, raising=False)  # this process is no member of the job
    job = {**YARN_JOB, "backend": {**YARN_JOB["backend"], "tls": True}}
    submit(yarn_world.job(**job), store=yarn_world.store)
    with running(yarn_world) as master:
        record = until(yarn_world, serving)
        trainer = container_process(executor(record, "trainer-0")["handle"]["ref"]["container"])
        trainer.send_signal(signal.SIGSTOP)  # holds the pass: every server stays up while we probe
        try:
            ca = read_job_ca("job")
            assert ca is not None
            job_ca = JobCa(ca, b"")
            dispatcher = record.status["master"]["dispatcher"]
            assert dispatcher.startswith("grpc+tls://")
            status = DispatcherClient(dispatcher, master.token, ca=job_ca).status()
            [location] = [e["location"] for e in status["executors"].values()]
            assert location.startswith("grpc+tls://")
            _reach(flight_client(location, job_ca), master.token)  # past the handshake and the token
            with pytest.raises(TlsError, match="no CA of the job"):
                flight_client(location)
            plain = flight.FlightClient(location.replace("grpc+tls://", "grpc://"))
            with pytest.raises(flight.FlightUnavailableError):
                plain.list_actions(_options(master.token, 5))
            stranger = flight_client(location, JobCa.create("another-job"))
            with pytest.raises(flight.FlightUnavailableError, match=r"(?i)handshake|certificate|ssl"):
                stranger.list_actions(_options(master.token, 5))

            # The ApplicationMaster's API is HTTPS with a certificate of the job's CA for its host:
            # the master's calls (and the job token in them) never cross the network in the clear.
            session = master.backend.session
            am = session.rm.app(session.app_id or "")["amRPCAddress"]
            assert session.am_client(am).url.startswith("https://")
            with pytest.raises(AmError) as refused:
                AmClient(f"https://{am}", "not-the-token", verify=verify_context(ca)).status()
            assert refused.value.status == 401
            with pytest.raises(AmUnreachable):
                AmClient(f"http://{am}", master.token, timeout_s=5).status()
            with pytest.raises(AmUnreachable, match=r"(?i)certificate|ssl"):
                stranger_ca = JobCa.create("another-job").cert_pem
                AmClient(f"https://{am}", master.token, verify=verify_context(stranger_ca)).status()

            # The executor's CA is the file YARN localized into its container, not the master's.
            data = container_process(executor(record, "data-0")["handle"]["ref"]["container"])
            folder = Path(data.environ()[TLS_DIR_ENV])
            assert folder == Path(data.cwd()) and folder != master.paths.tls
            assert (folder / CA_FILE).read_bytes() == ca
            assert (folder / CA_KEY_FILE).read_bytes() == (master.paths.tls / CA_KEY_FILE).read_bytes()
            for proc in (data, trainer):
                assert "PRIVATE KEY" not in " ".join(proc.cmdline())
                assert not any("PRIVATE KEY" in v for v in proc.environ().values())
        finally:
            trainer.send_signal(signal.SIGCONT)
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert_exactly_once(yarn_world)
