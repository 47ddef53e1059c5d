"""A job's token in each of its forms: the local file (0600 even over a laxer file), the environment,
the derived token, and the Kubernetes Secret and the pod variable that reads it."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from airflow_provider_primus.credentials import (
    TOKEN_ENV,
    derive_token,
    load_token,
    new_token,
    read_token_file,
    token_env_from_secret,
    token_from_secret,
    token_secret,
    write_token_file,
)


def test_tokens_are_random_and_long() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100 and all(len(t) >= 32 for t in tokens)


def test_a_derived_token_depends_on_the_secret_and_the_job() -> None:
    assert derive_token("s", "job") == derive_token("s", "job")
    assert len({derive_token("s", "job"), derive_token("s", "other"), derive_token("t", "job")}) == 3


def test_the_token_file_is_private_even_over_a_laxer_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    path.chmod(0o644)
    write_token_file(path, "new-token")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_token_file(path) == "new-token"


def test_an_executor_loads_its_token_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t").write_text("from-file\n")
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert load_token(tmp_path / "t") == "from-file"
    assert load_token() == "from-env"
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        load_token()


def test_the_secret_round_trips_and_pods_reference_it_by_name() -> None:
    owner = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "name": "j", "uid": "u"}
    secret = token_secret("j", "t0ken", labels={"primus.dev/job": "j"}, owner=owner)
    assert secret["metadata"] == {
        "name": "j-token",
        "labels": {"primus.dev/job": "j"},
        "ownerReferences": [owner],
    }
    assert secret["data"] == {"token": base64.b64encode(b"t0ken").decode()}
    assert token_from_secret(secret) == "t0ken"
    env = token_env_from_secret("j")
    assert env == {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": "j-token", "key": "token"}}}
    assert "t0ken" not in repr(env)
