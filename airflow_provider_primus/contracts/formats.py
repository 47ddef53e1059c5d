"""How a Kafka source's message values are encoded, beyond JSON: Avro and Protobuf settings.

Pure data, like the rest of the contract: the files named here are read (and refused when bad) by
``data/formats/``, at ``primus validate`` and when a trainer opens the stream. Field names follow
what a Confluent user already writes: a registry ``url`` (``schema.registry.url``), basic-auth user
and the *name* of the variable holding its password (``basic.auth.user.info`` without the secret in
the document), and the same ``ssl_*`` file names as the source's ``security``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.errors import raise_issues
from airflow_provider_primus.contracts.storage import EnvName, _env_name

__all__ = ["AvroFormat", "ProtobufFormat", "SchemaRegistry"]

FilePath = Annotated[str, Field(min_length=1)]
_URL = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
_MESSAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class SchemaRegistry(StrictModel):
    """A Confluent-compatible schema registry: ``url`` is the API root (``…/apis/ccompat/v7`` for
    Apicurio). ``password_env`` names the variable holding the basic-auth password in the process that
    decodes (the trainer); ``ssl_cafile`` is the CA that signed the registry's certificate (else the
    source's ``security.ssl_cafile``, else the system's)."""

    url: NonEmptyStr
    username: NonEmptyStr | None = None
    password_env: EnvName | None = None
    ssl_cafile: FilePath | None = None
    ssl_certfile: FilePath | None = None  # a client certificate, for registries that ask for one
    ssl_keyfile: FilePath | None = None
    ssl_check_hostname: bool = True
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not _URL.fullmatch(value):
            raise ValueError(f"must be an http:// or https:// URL without query or fragment (got {value!r})")
        if "@" in value.split("://", 1)[1].split("/", 1)[0]:
            # Never echoed: the part before '@' may be a password.
            raise ValueError(
                "must not carry credentials (user:password@): it is copied into messages and logs; "
                "use username and password_env"
            )
        return value.rstrip("/")

    @field_validator("password_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        return value if value is None else _env_name(value)

    @model_validator(mode="after")
    def _consistent(self) -> SchemaRegistry:
        issues: list[tuple[tuple[str, ...], str]] = []
        if (self.username is None) != (self.password_env is None):
            issues.append(
                (
                    ("password_env" if self.password_env is None else "username",),
                    "basic auth needs both username and password_env",
                )
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            issues.append(
                (
                    ("ssl_keyfile" if self.ssl_keyfile is None else "ssl_certfile",),
                    "a client certificate needs both ssl_certfile and ssl_keyfile",
                )
            )
        if not self.url.startswith("https://"):
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, key) is not None:
                    issues.append(((key,), "only allowed with an https:// url"))
        if issues:
            raise_issues(issues)
        return self

    def describe(self) -> str:
        """For messages: the URL and user, never a secret."""
        user = f" as user {self.username!r} (password from ${self.password_env})" if self.username else ""
        return self.url + user


class AvroFormat(StrictModel):
    """One of: ``schema_file`` (an ``.avsc`` file; every message is plain Avro binary in that
    schema) or ``registry`` (every message is in the Confluent wire format: byte 0, a 4-byte
    big-endian schema id, then Avro binary in the writer's schema the registry holds under that id)."""

    schema_file: FilePath | None = None
    registry: SchemaRegistry | None = None

    @model_validator(mode="after")
    def _one(self) -> AvroFormat:
        if (self.schema_file is None) == (self.registry is None):
            raise_issues(
                [
                    (
                        ("schema_file",),
                        "give exactly one of schema_file (plain Avro binary) or registry "
                        "(Confluent wire format)",
                    )
                ]
            )
        return self


class ProtobufFormat(StrictModel):
    """``descriptor_file``: a compiled ``FileDescriptorSet`` (``protoc --include_imports
    --descriptor_set_out=...``); ``message``: the fully qualified name of the message every value is.
    ``wire_format``: ``plain`` (each value is the serialized message) or ``confluent`` (what a
    Confluent ``KafkaProtobufSerializer`` writes: byte 0, a 4-byte schema id and the message's index
    path before it). The descriptor set is the reader's schema either way, as a Confluent consumer's
    generated class is: the id is not looked up, and a frame naming another message is refused."""

    descriptor_file: FilePath
    message: NonEmptyStr
    wire_format: Literal["plain", "confluent"] = "plain"

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        if not _MESSAGE.fullmatch(value):
            raise ValueError(
                f"must be a fully qualified message name like 'acme.events.Click' (got {value!r})"
            )
        return value
