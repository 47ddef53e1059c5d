"""S3-compatible object stores through pyarrow's ``S3FileSystem``: settings, credentials, errors.

Why pyarrow's own filesystem: its Parquet reader then issues ranged GETs for exactly the footer and
the column chunks it decodes (pre-buffered and coalesced), so planning reads a footer, an executor a
row group, and nothing downloads a whole object to read part of it.

Credentials are resolved here, in the process that reads, from what the contract *names*
(``contracts/storage.py``): environment variables, a Kubernetes Secret's variables, or an Airflow
connection. This module never imports Airflow: the operators resolve a connection
(``hooks/storage.py``) and pass the result down (:class:`ResolvedAccess`), or a backend puts it in a
process's environment under :func:`connection_env_names`. Secrets never appear in a ``repr``, an
error message or a log line; a filesystem is cached per settings so an executor does not rebuild its
client (and its connection pool) for every task.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from airflow_provider_primus.contracts.storage import Credentials, ObjectStorage, uri_scheme
from airflow_provider_primus.errors import PrimusError

__all__ = [
    "ObjectStoreError",
    "ResolvedAccess",
    "S3Credentials",
    "connection_env_names",
    "describe_failure",
    "object_version",
    "open_object_store",
    "resolve_credentials",
]


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # the secret half never reaches a log, even by accident
        return f"S3Credentials(access_key={self.access_key[:4]}…)"


@dataclass(frozen=True)
class ResolvedAccess:
    """What an Airflow connection resolved to: the key pair and, from its extra, an endpoint and a
    region used where the contract sets none."""

    credentials: S3Credentials
    endpoint: str | None = None
    region: str | None = None

    def __repr__(self) -> str:
        return f"ResolvedAccess({self.credentials!r}, endpoint={self.endpoint!r}, region={self.region!r})"


class ObjectStoreError(OSError, PrimusError):
    """An object store refused or failed a request; the message names the source (or what was being
    written), the location and the kind of failure, never a credential."""


class CredentialsError(ObjectStoreError):
    """The contract names credentials this process cannot find."""


def connection_env_names(connection: str) -> tuple[str, str, str]:
    """Where a process finds an Airflow connection's key pair when it cannot ask Airflow itself (an
    executor started by a backend for a DAG's job)."""
    stem = "PRIMUS_S3_CONNECTION_" + re.sub(r"[^A-Z0-9]", "_", connection.upper())
    return f"{stem}_ACCESS_KEY_ID", f"{stem}_SECRET_ACCESS_KEY", f"{stem}_SESSION_TOKEN"


def _from_env(names: tuple[str, str, str | None], what: str, owner: str) -> S3Credentials:
    key_name, secret_name, token_name = names
    missing = [n for n in (key_name, secret_name) if not os.environ.get(n)]
    if missing:
        raise CredentialsError(
            f"{owner}: credentials from {what} are not set in this process: {', '.join(missing)}"
        )
    token = os.environ.get(token_name) if token_name else None
    return S3Credentials(os.environ[key_name], os.environ[secret_name], token or None)


def resolve_credentials(
    credentials: Credentials | None,
    *,
    owner: str,
    resolved: Mapping[str, ResolvedAccess] | None = None,
) -> ResolvedAccess | None:
    """The key pair the contract names, or None to let the AWS SDK's default chain decide.

    ``owner`` is what the error names ("source 'clicks'", "checkpoints"); ``resolved`` maps an Airflow
    connection id to what the operator resolved it to.
    """
    if credentials is None:
        return None
    if credentials.connection is not None:
        conn = credentials.connection
        if resolved and conn in resolved:
            return resolved[conn]
        names = connection_env_names(conn)
        if os.environ.get(names[0]):
            stem = names[0].removesuffix("_ACCESS_KEY_ID")
            return ResolvedAccess(
                _from_env(names, f"Airflow connection {conn!r}", owner),
                endpoint=os.environ.get(f"{stem}_ENDPOINT_URL") or None,
                region=os.environ.get(f"{stem}_REGION") or None,
            )
        raise CredentialsError(
            f"{owner}: Airflow connection {conn!r} was not resolved in this process; run the job from "
            f"an Airflow task (the Primus operators resolve it) or set {names[0]} and {names[1]}"
        )
    if credentials.secret is not None:
        names = credentials.secret.env_names()
        return ResolvedAccess(
            _from_env(names, f"Kubernetes Secret {credentials.secret.name!r} (as {names[0]}, …)", owner)
        )
    assert credentials.env is not None
    env = credentials.env
    what = f"environment variables {env.access_key_id}/{env.secret_access_key}"
    return ResolvedAccess(
        _from_env((env.access_key_id, env.secret_access_key, env.session_token), what, owner)
    )


_cache_lock = threading.Lock()
_filesystems: dict[str, pafs.FileSystem] = {}


def _cache_key(*parts: object) -> str:
    # A digest, so the dictionary's keys never hold a secret in plain text.
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def open_object_store(
    uri: str,
    storage: ObjectStorage | None,
    *,
    owner: str,
    resolved: Mapping[str, ResolvedAccess] | None = None,
    allow_bucket_creation: bool = False,
) -> tuple[pafs.FileSystem, str]:
    """The filesystem for an ``s3://bucket/prefix`` URI and the root path in it (``bucket/prefix``).

    Without ``storage`` it is AWS with the SDK's default credential chain, as pyarrow would open it.
    """
    if uri_scheme(uri) != "s3":
        raise ValueError(f"{owner}: not an object-store URI: {uri!r}")
    settings = storage or ObjectStorage()
    access = resolve_credentials(settings.credentials, owner=owner, resolved=resolved)
    endpoint = settings.endpoint or (access.endpoint if access else None)
    region = settings.region or (access.region if access else None) or "us-east-1"
    kwargs: dict[str, Any] = {
        "region": region,
        "connect_timeout": settings.connect_timeout_s,
        "request_timeout": settings.request_timeout_s,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=settings.max_attempts),
        "allow_bucket_creation": allow_bucket_creation,
        "allow_bucket_deletion": False,
    }
    if endpoint:
        parts = urlsplit(endpoint)
        kwargs["scheme"] = parts.scheme
        kwargs["endpoint_override"] = parts.netloc
    if settings.addressing == "virtual":
        kwargs["force_virtual_addressing"] = True
    if access is not None:
        kwargs["access_key"] = access.credentials.access_key
        kwargs["secret_key"] = access.credentials.secret_key
        if access.credentials.session_token:
            kwargs["session_token"] = access.credentials.session_token
    key = _cache_key(sorted((k, repr(v)) for k, v in kwargs.items()))
    with _cache_lock:
        fs = _filesystems.get(key)
        if fs is None:
            fs = _filesystems[key] = pafs.S3FileSystem(**kwargs)
    root = uri.split("://", 1)[1].rstrip("/")
    return fs, root


def object_version(handle: Any) -> str:
    """The ETag (or version id) of an opened object, from the HEAD its opening sent; "" when the
    filesystem does not say (local files, wrapped filesystems)."""
    try:
        meta = handle.metadata()
    except (AttributeError, NotImplementedError, OSError):
        return ""
    if not meta:
        return ""
    values = {k.decode() if isinstance(k, bytes) else k: v for k, v in meta.items()}
    for name in ("VersionId", "x-amz-version-id", "ETag"):
        value = values.get(name)
        if value:
            return (value.decode() if isinstance(value, bytes) else str(value)).strip('"')
    return ""


_DENIED = ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID", "HTTP status 403")
_UNREACHABLE = ("NETWORK_CONNECTION", "Couldn't connect", "curlCode: 7", "Connection refused", "Timeout")


def describe_failure(exc: BaseException) -> str:
    """What kind of failure a pyarrow S3 error is, in words a data engineer acts on."""
    text = str(exc)
    if any(marker in text for marker in _DENIED):
        return "the object store refused the credentials (access denied)"
    if any(marker.lower() in text.lower() for marker in _UNREACHABLE):
        return "the object store is unreachable (retried, still failing)"
    if isinstance(exc, FileNotFoundError) or "NO_SUCH_KEY" in text or "HTTP status 404" in text:
        return "no such object"
    if "NO_SUCH_BUCKET" in text:
        return "no such bucket"
    return "the request failed"


def named_failure(owner: str, action: str, location: str, exc: BaseException) -> ObjectStoreError:
    """``exc`` as an error naming who failed, doing what, where; keeps FileNotFoundError's type."""
    message = f"{owner}: {action} {location}: {describe_failure(exc)}: {exc}"
    if isinstance(exc, FileNotFoundError):
        return MissingObjectError(message)
    return ObjectStoreError(message)


class MissingObjectError(ObjectStoreError, FileNotFoundError):
    """An object the plan named is gone (deleted or moved since it was planned)."""
