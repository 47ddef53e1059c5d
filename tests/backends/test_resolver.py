"""Which backend a job lives on, found from settings (the hook's) and from a command's flags and
document (the CLI's), and what each kind does with a real local job store."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.backends import (
    JobBackend,
    KubernetesJobBackend,
    LocalJobBackend,
    Place,
    UnknownBackendError,
    YarnJobBackend,
    for_document,
    for_settings,
    stored_kind,
)
from airflow_provider_primus.contracts.loader import read_document
from airflow_provider_primus.credentials import derive_token
from airflow_provider_primus.errors import is_terminal
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import job_paths
from tests.master.conftest import JobWorld

YARN = {"resource_manager": "http://127.0.0.1:8088", "queue": "connection-queue"}


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _submit(backend: JobBackend, world: JobWorld, name: str = "job") -> str:
    path = world.job(name)
    return backend.submit(read_document(path), path.parent).name


@pytest.mark.parametrize(
    ("kind", "cls", "store_kind"),
    [
        ("local", LocalJobBackend, "local"),
        ("yarn", YarnJobBackend, "local"),
        ("kubernetes", KubernetesJobBackend, "kubernetes"),
    ],
)
def test_each_kind_has_its_class(kind: str, cls: type[JobBackend], store_kind: str) -> None:
    backend = for_settings(kind)
    assert type(backend) is cls
    assert backend.store_kind == store_kind
    assert backend.restart_master_on_reattach is (cls is YarnJobBackend)


def test_an_unknown_kind_is_a_terminal_error_naming_the_known_ones() -> None:
    """A connection saying ``backend: k8s`` must not quietly submit to the local store."""
    with pytest.raises(UnknownBackendError, match=r"'k8s'.*kubernetes, local, yarn") as caught:
        for_settings("k8s")
    assert is_terminal(caught.value)


def test_the_local_store_is_homes_and_a_background_master_opens_it(tmp_path: Path) -> None:
    backend = for_settings("local", Place(home=tmp_path))
    assert backend.where == str(tmp_path / "jobs.sqlite")
    assert backend.master_args() == ["--store", str(tmp_path / "jobs.sqlite")]
    assert backend.store.find() == []
    explicit = for_settings("local", Place(home=tmp_path, store_path=tmp_path / "other.sqlite"))
    assert explicit.where == str(tmp_path / "other.sqlite")


def test_a_cluster_place_is_its_namespace_and_builds_no_client_until_asked() -> None:
    backend = for_settings("kubernetes", Place(kubeconfig="/nowhere/config", context="ctx"))
    assert isinstance(backend, KubernetesJobBackend)
    assert backend.where == "namespace default"
    assert backend.master_args() == [
        "--namespace",
        "default",
        "--kubeconfig",
        "/nowhere/config",
        "--context",
        "ctx",
    ]
    assert "api" not in vars(backend)  # nothing reached the cluster


def test_a_submitted_job_reads_its_token_and_ca_where_it_was_submitted(job_world: JobWorld) -> None:
    backend = for_settings("local", Place(home=job_world.home))
    name = _submit(backend, job_world)
    token = job_paths(name, job_world.home).token.read_text().strip()
    assert backend.token(name) == token
    assert backend.credentials(name) == (token, None)  # no TLS: no CA
    assert backend.store.get(name).status.get("phase") in (None, "Pending")


def test_a_secret_derives_the_token_and_the_submission_uses_it(job_world: JobWorld) -> None:
    backend = for_settings("local", Place(home=job_world.home, secret="s3cret"))
    name = _submit(backend, job_world, "derived")
    assert backend.token(name) == derive_token("s3cret", name)
    assert job_paths(name, job_world.home).token.read_text().strip() == derive_token("s3cret", name)


def test_yarn_fills_the_document_where_it_is_silent_and_the_stored_kind_picks_the_class(
    job_world: JobWorld,
) -> None:
    document = {"spec": {"backend": {"yarn": {"queue": "document-queue"}}}}
    yarn = for_settings("yarn", Place(home=job_world.home, yarn=YARN))
    assert yarn.prepare(document)["spec"]["backend"] == {
        "type": "yarn",
        "yarn": {"resource_manager": YARN["resource_manager"], "queue": "document-queue"},
    }
    on_yarn = _submit(yarn, job_world, "on-yarn")
    local = for_settings("local", Place(home=job_world.home))
    plain = _submit(local, job_world, "plain")
    assert stored_kind(local.store.get(on_yarn)) == "yarn"
    assert stored_kind(local.store.get(plain)) == "local"
    found = local.for_job(on_yarn)
    assert type(found) is YarnJobBackend
    assert found.store is local.store and found.place is local.place  # one store, one place
    assert local.for_job(plain) is local


def test_cancel_without_a_master_records_the_stop_for_the_next_one(job_world: JobWorld) -> None:
    backend = for_settings("local", Place(home=job_world.home))
    name = _submit(backend, job_world)
    client = ControlClient(f"http://127.0.0.1:{_closed_port()}", backend.token(name), 2.0, retries=0)
    backend.cancel(name, client.stop)
    assert backend.store.get(name).desired.get("stop") is True


def test_async_cancel_without_a_master_records_the_stop_too(job_world: JobWorld) -> None:
    backend = for_settings("local", Place(home=job_world.home))
    name = _submit(backend, job_world)
    client = ControlClient(f"http://127.0.0.1:{_closed_port()}", backend.token(name), 2.0, retries=0)
    asyncio.run(backend.acancel(name, client.astop))
    assert backend.store.get(name).desired.get("stop") is True


def _kube_document(path: Path, kubernetes: dict[str, str] | None) -> Path:
    backend: dict[str, object] = {"type": "kubernetes"}
    if kubernetes is not None:
        backend["kubernetes"] = kubernetes
    path.write_text(yaml.safe_dump({"metadata": {"name": "j"}, "spec": {"backend": backend}}))
    return path


def test_a_command_reaches_the_cluster_its_document_or_flags_name(tmp_path: Path) -> None:
    document = _kube_document(tmp_path / "job.yaml", {"namespace": "team", "context": "prod"})
    backend = for_document(document)
    assert isinstance(backend, KubernetesJobBackend)
    assert (backend.namespace, backend.place.context) == ("team", "prod")
    assert backend.place.local_credentials_first  # a job submitted here: its files first
    flagged = for_document(document, namespace="mine", context="dev")
    assert isinstance(flagged, KubernetesJobBackend)
    assert (flagged.namespace, flagged.place.context) == ("mine", "dev")
    bare = for_document(_kube_document(tmp_path / "bare.yaml", None))
    assert isinstance(bare, KubernetesJobBackend) and bare.namespace == "default"
    assert isinstance(for_document(None, kubeconfig="/nowhere/config"), KubernetesJobBackend)


def test_a_command_reaches_the_local_store_otherwise(tmp_path: Path) -> None:
    document = _kube_document(tmp_path / "job.yaml", {"namespace": "team"})
    store = tmp_path / "jobs.sqlite"
    local = for_document(document, store_path=store)  # an explicit local store wins
    assert type(local) is LocalJobBackend and local.where == str(store)
    assert type(for_document(Path("a-job-name"))) is LocalJobBackend
    unreadable = tmp_path / "broken.yaml"
    unreadable.write_text("spec: [unclosed")
    assert type(for_document(unreadable)) is LocalJobBackend  # the command reports it itself
    other = tmp_path / "local.yaml"
    other.write_text(yaml.safe_dump({"spec": {"backend": {"type": "yarn"}}}))
    assert type(for_document(other)) is LocalJobBackend
