"""What needs no cluster: a Kerberized configuration without credentials refused, an Airflow
connection filling a job document's YARN settings, and how an allotment becomes a container's size
(the Hadoop client's own reading of a configuration is tested in tests/hadoop)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.job import YarnBackend as YarnSettings
from airflow_provider_primus.contracts.job import validate_job_spec
from airflow_provider_primus.hadoop.config import load_conf
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.master import Master, MasterError
from airflow_provider_primus.resources.backend import Allotment
from airflow_provider_primus.yarn.application import (
    YarnApplicationError,
    YarnSession,
    document_link,
    submission_tag,
    with_yarn_backend,
)
from airflow_provider_primus.yarn.backend import memory_mb, vcores
from airflow_provider_primus.yarn.submission import backend_factory
from tests.hadoop.sites import site
from tests.master.conftest import JobWorld


def no_kerberos_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'no-cache'}")
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    monkeypatch.delenv("PRIMUS_KERBEROS_PRINCIPAL", raising=False)
    monkeypatch.delenv("PRIMUS_KERBEROS_KEYTAB", raising=False)


def test_a_kerberized_cluster_without_credentials_is_refused_with_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_kerberos_credentials(monkeypatch, tmp_path)
    site(tmp_path / "core-site.xml", **{"hadoop.security.authentication": "kerberos"})
    site(tmp_path / "yarn-site.xml")
    site(tmp_path / "hdfs-site.xml")
    conf = load_conf(tmp_path)
    assert conf.kerberos
    with pytest.raises(YarnApplicationError, match=r"Kerberized and (no Kerberos credentials|the gssapi)"):
        YarnSession("job", "token", YarnSettings(), {}, conf=conf)
    with pytest.raises(ValueError, match=r"keytab needs principal"):
        YarnSettings(keytab="/etc/krb5.keytab")


def test_a_job_for_a_kerberized_cluster_fails_with_the_reason_in_its_status(
    job_world: JobWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where users look (``primus status``, the operator), not only in the master's traceback; and
    nothing is sent to the cluster (its address here is one nothing listens on)."""
    no_kerberos_credentials(monkeypatch, tmp_path)
    conf = tmp_path / "hadoop"
    conf.mkdir()
    site(conf / "core-site.xml", **{"hadoop.security.authentication": "kerberos"})
    site(conf / "yarn-site.xml", **{"yarn.resourcemanager.hostname": "127.0.0.1"})
    site(conf / "hdfs-site.xml")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    submit(job_world.job(backend={"type": "yarn"}), store=job_world.store)
    with pytest.raises(MasterError, match="yarn backend cannot run this job"):
        Master("job", job_world.store, backend_factory=backend_factory())
    status = job_world.store.get("job").status
    assert status["phase"] == "Failed"
    assert "no Kerberos credentials" in status["message"] or "gssapi" in status["message"], status["message"]
    assert [e.type for e in job_world.store.events("job")][-1] == "Failed"


def test_the_connection_fills_what_the_document_leaves_out() -> None:
    document = {"spec": {"data": "d.yaml", "backend": {"yarn": {"queue": "mine"}}}}
    out = with_yarn_backend(document, {"queue": "theirs", "resource_manager": "http://rm:8088"})
    assert out["spec"]["backend"] == {
        "type": "yarn",
        "yarn": {"queue": "mine", "resource_manager": "http://rm:8088"},
    }
    assert document["spec"]["backend"] == {"yarn": {"queue": "mine"}}  # not modified


def test_yarn_settings_belong_to_the_yarn_backend_only() -> None:
    job = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "metadata": {"name": "j"}}
    ok = validate_job_spec(
        {**job, "spec": {"data": "d", "backend": {"type": "yarn", "yarn": {"queue": "q"}}}}
    )
    assert ok.spec.backend.yarn is not None and ok.spec.backend.yarn.am_memory == 512 * 2**20
    with pytest.raises(SpecError, match=r"spec\.backend\.yarn: only allowed with backend\.type 'yarn'"):
        validate_job_spec({**job, "spec": {"data": "d", "backend": {"type": "local", "yarn": {}}}})


def test_an_allotment_becomes_whole_vcores_and_mebibytes() -> None:
    assert (memory_mb(Allotment(0.5, 300 * 2**20 + 1)), vcores(Allotment(0.5, 2**30))) == (301, 1)
    assert vcores(Allotment(1.5, 2**30)) == 2 and vcores(Allotment(2.0, 2**30)) == 2


def test_names_given_to_the_cluster_carry_no_secret() -> None:
    token = "s3cr3t-token"
    assert token not in submission_tag(token) and submission_tag(token) == submission_tag(token)
    assert document_link(1, "/a/b/training.yaml") == "document-1-training.yaml"


@pytest.mark.parametrize(
    ("backend", "host", "tls", "expected"),
    [
        ("yarn", "127.0.0.1", None, False),  # one machine: nothing leaves it
        ("yarn", "10.0.0.5", None, True),  # NodeManagers elsewhere reach the master: TLS
        ("yarn", "0.0.0.0", None, True),
        ("yarn", "10.0.0.5", False, False),  # the job's own word wins
        ("local", "10.0.0.5", None, True),
        ("kubernetes", "127.0.0.1", None, True),
    ],
)
def test_tls_defaults_as_on_the_other_backends(
    backend: str, host: str, tls: bool | None, expected: bool
) -> None:
    settings: dict[str, object] = {"type": backend, **({"tls": tls} if tls is not None else {})}
    doc = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "metadata": {"name": "j"}}
    spec = {"data": "d", "backend": settings, "control": {"host": host}}
    assert validate_job_spec({**doc, "spec": spec}).spec.tls is expected
