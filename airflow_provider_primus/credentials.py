"""A job's token, the one credential of a job, on every backend: how it is made, named and kept.

Every call to a job's control API, dispatcher and data executors carries the token, so the places
that create, store, hand over and read it must agree byte for byte. They used to be spread over the
Flight auth middleware, job submission, the Kubernetes submission code and the Airflow hook; here
they are one module. It is a top-level module rather than ``data/service/auth.py`` grown: that
module is the Flight servers' middleware and imports ``pyarrow.flight``, which the CLI, the hook and
the Kubernetes code must not pay for to learn an environment variable's name.

What lives here is the format: the token itself, the environment variable that carries it into a
process, the local file (0600, created with ``O_EXCL`` so it can never inherit a laxer mode from an
earlier file), and the Kubernetes Secret (its name, key and encoding; pods read it through
``secretKeyRef``). I/O against a cluster stays with the caller, which goes through these builders
and readers. The token is never logged, and nothing here puts it in an exception message.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "SECRET_KEY",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "TOKEN_FILE_MODE",
    "derive_token",
    "load_token",
    "new_token",
    "read_token_file",
    "token_env_from_secret",
    "token_from_secret",
    "token_secret",
    "token_secret_name",
    "write_token_file",
]

TOKEN_ENV = "PRIMUS_JOB_TOKEN"  # processes get the token from the environment, never argv (``ps``)
# Or from a file this names: a YARN container's token is a LocalResource, not a launch-context value.
TOKEN_FILE_ENV = "PRIMUS_JOB_TOKEN_FILE"
TOKEN_FILE_MODE = 0o600
SECRET_KEY = "token"  # the key of the token in the job's Secret


def new_token() -> str:
    return secrets.token_urlsafe(32)


def derive_token(secret: str, job: str) -> str:
    """A job's token derived from a shared secret (an Airflow connection's password): whoever holds
    the secret can talk to any job it names without having submitted it (HMAC-SHA256 of the name)."""
    return hmac.new(secret.encode(), job.encode(), hashlib.sha256).hexdigest()


# --- the local file -------------------------------------------------------------------------------


def write_token_file(path: Path, token: str) -> None:
    """Write the token afresh: an existing file is removed first, because ``O_EXCL`` is what
    guarantees the new one is created with mode 0600 instead of keeping an older file's mode."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, TOKEN_FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(token)


def read_token_file(path: Path) -> str:
    return path.read_text().strip()


def load_token(token_file: Path | None = None) -> str:
    """An executor's token: from ``token_file`` if given, else from ``$PRIMUS_JOB_TOKEN``, else from
    the file ``$PRIMUS_JOB_TOKEN_FILE`` names."""
    if token_file is not None:
        return read_token_file(token_file)
    token = os.environ.get(TOKEN_ENV, "")
    if not token and os.environ.get(TOKEN_FILE_ENV):
        return read_token_file(Path(os.environ[TOKEN_FILE_ENV]))
    if not token:
        raise RuntimeError(f"no job token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV}) or pass --token-file")
    return token


# --- the Kubernetes Secret ------------------------------------------------------------------------


def token_secret_name(job: str) -> str:
    return f"{job}-token"


def token_secret(
    job: str,
    token: str,
    *,
    labels: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The job's token Secret; ``owner`` (a reference to the PrimusJob) lets the garbage collector
    delete it with the job."""
    meta: dict[str, Any] = {"name": token_secret_name(job)}
    if labels:
        meta["labels"] = dict(labels)
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(token.encode()).decode()},
    }


def token_from_secret(secret: Mapping[str, Any]) -> str:
    """The token of a Secret object as the apiserver returns it (``data`` is base64)."""
    return base64.b64decode(secret["data"][SECRET_KEY]).decode()


def token_env_from_secret(job: str, name: str = TOKEN_ENV) -> dict[str, Any]:
    """A container's token variable, resolved by the kubelet from the job's Secret: the token never
    appears in a pod spec."""
    return {
        "name": name,
        "valueFrom": {"secretKeyRef": {"name": token_secret_name(job), "key": SECRET_KEY}},
    }
