"""How to reach an S3-compatible object store: endpoint, region, addressing and where credentials come
from — never the credentials themselves.

Pure data. A contract document is copied into task graphs, job records, logs and the UI, so it may
only *name* a secret: an Airflow connection (resolved by the operator that runs the job), environment
variables (an executor's own environment), or a Kubernetes Secret (injected into executor pods as the
environment variables :meth:`SecretCredentials.env_names` gives). Resolving them is the data layer's
job (``data/objectstore.py``); the Airflow lookup is the operators' (``hooks/storage.py``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, Strict, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.errors import raise_issues

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")
OBJECT_STORE_SCHEMES = ("s3",)


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(f"must be an environment variable name (letters, digits, '_'; got {value!r})")
    return value


EnvName = Annotated[str, Field(json_schema_extra={"pattern": f"^{_ENV_NAME.pattern}$"})]


class EnvCredentials(StrictModel):
    """The names of the environment variables holding the key pair (AWS's names by default)."""

    access_key_id: EnvName = "AWS_ACCESS_KEY_ID"
    secret_access_key: EnvName = "AWS_SECRET_ACCESS_KEY"
    session_token: EnvName | None = "AWS_SESSION_TOKEN"

    @field_validator("access_key_id", "secret_access_key", "session_token")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return value if value is None else _env_name(value)


class SecretCredentials(StrictModel):
    """A Kubernetes Secret of the job's namespace holding the key pair under ``*_key``."""

    name: NonEmptyStr
    access_key_id_key: NonEmptyStr = "access_key_id"
    secret_access_key_key: NonEmptyStr = "secret_access_key"
    session_token_key: NonEmptyStr | None = None

    @field_validator("name")
    @classmethod
    def _secret_name(cls, value: str) -> str:
        if len(value) > 253 or not _SECRET_NAME.fullmatch(value):
            raise ValueError(f"must be a Kubernetes Secret name (DNS-1123 subdomain; got {value!r})")
        return value

    @field_validator("access_key_id_key", "secret_access_key_key", "session_token_key")
    @classmethod
    def _secret_key(cls, value: str | None) -> str | None:
        if value is not None and not _SECRET_KEY.fullmatch(value):
            raise ValueError(f"must be a Secret data key (letters, digits, '-', '_', '.'; got {value!r})")
        return value

    def env_names(self) -> tuple[str, str, str]:
        """The variables a pod gets the Secret's keys in (through ``secretKeyRef``), derived from the
        Secret's name so two sources with different Secrets never collide."""
        stem = "PRIMUS_S3_SECRET_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())
        return f"{stem}_ACCESS_KEY_ID", f"{stem}_SECRET_ACCESS_KEY", f"{stem}_SESSION_TOKEN"


class Credentials(StrictModel):
    """Exactly one place the key pair comes from; none at all means anonymous access."""

    connection: NonEmptyStr | None = None  # an Airflow connection id (type ``aws``)
    env: EnvCredentials | None = None
    secret: SecretCredentials | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Credentials:
        given = [name for name in ("connection", "env", "secret") if getattr(self, name) is not None]
        if len(given) != 1:
            raise_issues(
                [
                    (
                        (),
                        "set exactly one of 'connection' (an Airflow connection id), 'env' (environment "
                        f"variable names) or 'secret' (a Kubernetes Secret); got {given or 'none'}",
                    )
                ]
            )
        return self

    def describe(self) -> str:
        """Where the credentials come from, for error messages: names only, never values."""
        if self.connection is not None:
            return f"Airflow connection {self.connection!r}"
        if self.secret is not None:
            return f"Kubernetes Secret {self.secret.name!r}"
        assert self.env is not None
        return f"environment variables {self.env.access_key_id}/{self.env.secret_access_key}"


class ObjectStorage(StrictModel):
    """An S3-compatible endpoint. ``endpoint`` None means AWS itself (region decides the host);
    ``addressing`` is how buckets are named in requests: ``path`` (``host/bucket/key``, what most
    self-hosted stores need) or ``virtual`` (``bucket.host/key``)."""

    endpoint: NonEmptyStr | None = None
    region: NonEmptyStr | None = None  # default: the connection's region_name, else us-east-1
    addressing: Literal["path", "virtual"] = "path"
    credentials: Credentials | None = None
    # Attempts per request on connection errors, throttling and 5xx answers (exponential backoff with
    # jitter, capped), before the error reaches the caller naming the source.
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=50)] = 8
    connect_timeout_s: Annotated[float, Strict(), Field(gt=0, le=600, allow_inf_nan=False)] = 5.0
    request_timeout_s: Annotated[float, Strict(), Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be http://host[:port] or https://host[:port] (got {value!r})")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ValueError(f"must name only a scheme, host and port, no path or user (got {value!r})")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError as exc:
            raise ValueError(f"bad port in {value!r}: {exc}") from None
        return value.rstrip("/")


def uri_scheme(uri: str) -> str:
    """``s3`` for ``s3://bucket/prefix``; ``file`` for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def storage_issues(uri: str, storage: ObjectStorage | None) -> list[str]:
    """Why ``storage`` cannot go with ``uri``: settings on a local path would be silently ignored."""
    scheme = uri_scheme(uri)
    if storage is not None and scheme not in OBJECT_STORE_SCHEMES:
        return [f"'storage' applies to s3:// locations only (this one is {scheme}://)"]
    if scheme == "s3" and not uri.split("://", 1)[1].split("/", 1)[0]:
        return [f"an s3:// location needs a bucket (got {uri!r})"]
    return []


__all__ = [
    "OBJECT_STORE_SCHEMES",
    "Credentials",
    "EnvCredentials",
    "ObjectStorage",
    "SecretCredentials",
    "storage_issues",
    "uri_scheme",
]
