"""A client of a Confluent-compatible schema registry: the writer's schema for a schema id, cached.

Only ``GET <url>/schemas/ids/<id>`` is needed to read the wire format. Each id is asked once per
process (a registry's ids are immutable), "no such id" included, so a burst of records with a bad id
costs one request, not one each. TLS and basic auth come from the source's ``avro.registry``
settings; the password is read from its variable when the client is made and never logged.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.formats import SchemaRegistry
from airflow_provider_primus.data.formats.errors import FormatFileError, RegistryUnavailableError
from airflow_provider_primus.errors import PrimusError

__all__ = ["RegistryClient", "UnknownSchemaId"]


class UnknownSchemaId(PrimusError, LookupError):
    """The registry has no schema under the id (HTTP 404), or one that is not Avro."""


class RegistryClient:
    def __init__(
        self,
        settings: SchemaRegistry,
        *,
        fallback_cafile: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.settings = settings
        self._headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
        if settings.username is not None and settings.password_env is not None:
            password = environ.get(settings.password_env)
            if not password:
                raise FormatFileError(
                    "avro.registry.password_env",
                    f"the registry password is read from ${settings.password_env}, which is not set in "
                    "this process",
                )
            token = base64.b64encode(f"{settings.username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self._context = self._ssl_context(fallback_cafile) if settings.url.startswith("https://") else None
        self._cache: dict[int, str | UnknownSchemaId] = {}
        self.requests = 0  # registry round trips, for tests and benches

    def _ssl_context(self, fallback_cafile: str | None) -> ssl.SSLContext:
        s = self.settings
        cafile = s.ssl_cafile or fallback_cafile
        for field, path in (
            ("ssl_cafile", cafile),
            ("ssl_certfile", s.ssl_certfile),
            ("ssl_keyfile", s.ssl_keyfile),
        ):
            if path is not None and not Path(path).expanduser().is_file():
                raise FormatFileError(
                    f"avro.registry.{field}", f"{path!r} is not a readable file on this machine"
                )
        context = ssl.create_default_context(cafile=str(Path(cafile).expanduser()) if cafile else None)
        context.check_hostname = s.ssl_check_hostname
        if s.ssl_certfile and s.ssl_keyfile:
            context.load_cert_chain(
                str(Path(s.ssl_certfile).expanduser()), str(Path(s.ssl_keyfile).expanduser())
            )
        return context

    def schema_text(self, schema_id: int) -> str:
        """The schema registered under ``schema_id`` (its JSON text); ``UnknownSchemaId`` when there
        is none, ``RegistryUnavailableError`` when the registry cannot say."""
        cached = self._cache.get(schema_id)
        if isinstance(cached, UnknownSchemaId):
            raise cached
        if cached is not None:
            return cached
        try:
            body = self._get(f"/schemas/ids/{schema_id}")
        except UnknownSchemaId as exc:
            self._cache[schema_id] = exc
            raise
        schema_type = str(body.get("schemaType") or "AVRO").upper()
        text = body.get("schema")
        if schema_type != "AVRO" or not isinstance(text, str):
            unknown = UnknownSchemaId(f"schema id {schema_id} is a {schema_type} schema, not Avro")
            self._cache[schema_id] = unknown
            raise unknown
        self._cache[schema_id] = text
        return text

    def _get(self, path: str) -> dict[str, Any]:
        url = self.settings.url + path
        request = urllib.request.Request(url, headers=self._headers)
        self.requests += 1
        try:
            with urllib.request.urlopen(
                request, timeout=self.settings.timeout_s, context=self._context
            ) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = _error_message(exc)
            if exc.code == 404:
                raise UnknownSchemaId(
                    f"unknown schema id: the registry at {self.settings.url} has none ({detail})"
                ) from None
            raise RegistryUnavailableError(
                f"schema registry {self.settings.describe()}: HTTP {exc.code} for {path}: {detail}"
            ) from None
        except (OSError, ValueError) as exc:
            raise RegistryUnavailableError(
                f"schema registry {self.settings.describe()} cannot be reached: {exc}"
            ) from None
        if not isinstance(body, dict):
            raise RegistryUnavailableError(f"schema registry {self.settings.url}: {path} answered {body!r}")
        return body


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return exc.reason if isinstance(exc.reason, str) else str(exc.code)
    return str(body.get("message") or exc.reason) if isinstance(body, dict) else str(exc.reason)
