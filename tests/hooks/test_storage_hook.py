"""Object-store credentials from an Airflow ``aws`` connection, and how a process without Airflow
finds them again; no value ever shows in a repr or an error."""

from __future__ import annotations

import json

import pytest

from airflow_provider_primus.contracts.storage import Credentials
from airflow_provider_primus.data.objectstore import CredentialsError, resolve_credentials
from airflow_provider_primus.hooks.storage import connection_environment, resolve_connection


def test_an_aws_connection_resolves_and_travels_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {
        "conn_type": "aws",
        "login": "AKIATEST",
        "password": "very-secret",
        "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps(conn))
    access = resolve_connection("lake")
    assert (access.credentials.access_key, access.endpoint, access.region) == (
        "AKIATEST",
        "http://127.0.0.1:9000",
        "eu-west-1",
    )
    assert "very-secret" not in repr(access)
    env = connection_environment({"lake": access})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    again = resolve_credentials(Credentials(connection="lake"), owner="source 'clicks'")
    assert again is not None and again.credentials == access.credentials
    assert (again.endpoint, again.region) == (access.endpoint, access.region)


def test_an_unresolved_connection_says_how_to_provide_it() -> None:
    with pytest.raises(
        CredentialsError, match=r"source 'clicks': Airflow connection 'nowhere' was not resolved"
    ):
        resolve_credentials(Credentials(connection="nowhere"), owner="source 'clicks'")


def test_a_connection_without_a_key_pair_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_EMPTY", json.dumps({"conn_type": "aws"}))
    with pytest.raises(ValueError, match="'empty' has no access key and secret"):
        resolve_connection("empty")
