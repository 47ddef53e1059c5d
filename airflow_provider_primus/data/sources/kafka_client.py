"""The one place Kafka clients are configured: a source's (or a tool's) settings become kafka-python's
keyword arguments here, and every consumer, producer and admin client is made here.

Why one place: a secured cluster needs the same protocol, SASL user, password and TLS files on every
client a process opens (the stream, offset commits, the dead-letter producer, the planner's offset
lookups, ``primus gen``); a client built anywhere else would silently speak PLAINTEXT.

Secrets: the contract names where the password is (an environment variable, or an Airflow ``kafka``
connection the operators resolved into ``PRIMUS_KAFKA_CONNECTION_<ID>_CONFIG``); the value is read
here, kept out of every ``repr`` and never put in a message. A wrong password is a permanent error
(:class:`KafkaAuthError`, naming the source) within a bounded time, not an outage waited out forever:
kafka-python retries a failing bootstrap until its timeout and then reports only a timeout, so the
authentication failures it logs while bootstrapping are watched for and turned into that error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kafka.errors import KafkaError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

from airflow_provider_primus.contracts.kafka import SASL_MECHANISMS, SECURITY_PROTOCOLS, KafkaSecurity
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.errors import PrimusError

__all__ = [
    "KafkaAuthError",
    "KafkaClient",
    "KafkaClientError",
    "KafkaTarget",
    "admin_client",
    "client_config",
    "connection_env_name",
    "consumer",
    "kafka_client",
    "producer",
    "security_from_client_config",
    "security_settings",
    "tool_client",
]

# A secured cluster that refuses a client is known within this long (plus one request timeout):
# kafka-python's bootstrap is bounded by it, and its logged authentication failures are collected.
SECURED_BOOTSTRAP_TIMEOUT_MS = 10_000

_log = logging.getLogger(__name__)


class KafkaClientError(ValueError, PrimusError):
    """A source's client settings cannot be used in this process (a password variable unset, a TLS
    file missing, an Airflow connection not resolved); the message names the source."""


class KafkaAuthError(PrimusError):
    """The cluster refused the client's credentials or certificate: permanent, never retried as an
    outage. The message names the source, the servers and the settings, never a secret."""


@dataclass(frozen=True)
class KafkaClient:
    """Resolved client settings: who they are for (``owner``), the bootstrap servers and the rest of
    kafka-python's keyword arguments (which may hold a password: never shown)."""

    owner: str
    servers: str
    settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    described: str = "PLAINTEXT"

    def __repr__(self) -> str:
        return f"KafkaClient({self.owner}, servers={self.servers!r}, {self.described})"

    @property
    def secured(self) -> bool:
        return bool(self.settings.get("security_protocol", "PLAINTEXT") != "PLAINTEXT")

    def kwargs(self, **overrides: Any) -> dict[str, Any]:
        """kafka-python's keyword arguments: these settings plus a client's own (``client_id``,
        timeouts, fetch sizes); the security settings cannot be overridden by a caller."""
        merged: dict[str, Any] = {"bootstrap_servers": [s.strip() for s in self.servers.split(",")]}
        if self.secured:
            merged["bootstrap_timeout_ms"] = SECURED_BOOTSTRAP_TIMEOUT_MS
        merged.update(overrides)
        merged.update(self.settings)
        if "client_id" in self.settings and "client_id" in overrides:
            merged["client_id"] = self.settings["client_id"]  # the contract's client id wins
        return merged


# What a client may be made from: a source, resolved settings, or plain bootstrap servers (PLAINTEXT:
# the embedded broker, tests and tools that only ever talk to it).
KafkaTarget = KafkaSource | KafkaClient | str | Sequence[str]


def connection_env_name(connection: str) -> str:
    """Where a process finds an Airflow ``kafka`` connection's client config (JSON) when it cannot ask
    Airflow itself: set by the operators and the hook (``hooks/kafka.py``)."""
    return "PRIMUS_KAFKA_CONNECTION_" + re.sub(r"[^A-Z0-9]", "_", connection.upper()) + "_CONFIG"


def _env_secret(name: str, owner: str, what: str, environ: Mapping[str, str]) -> str:
    value = environ.get(name)
    if not value:
        raise KafkaClientError(f"{owner}: the {what} is read from ${name}, which is not set in this process")
    return value


def _file(path: str, owner: str, what: str) -> str:
    found = Path(path).expanduser()
    if not found.is_file():
        raise KafkaClientError(f"{owner}: {what} {path!r} is not a readable file on this machine")
    return str(found)


def security_settings(
    security: KafkaSecurity, owner: str, environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """kafka-python's keyword arguments for ``security``, the password read from its variable."""
    out: dict[str, Any] = {"security_protocol": security.protocol}
    if security.sasl_mechanism is not None:
        assert security.password_env is not None  # the contract requires it with SASL
        out["sasl_mechanism"] = security.sasl_mechanism
        out["sasl_plain_username"] = security.username
        out["sasl_plain_password"] = _env_secret(security.password_env, owner, "SASL password", environ)
    if security.protocol.endswith("SSL"):
        out["ssl_check_hostname"] = security.ssl_check_hostname
        if security.ssl_cafile:
            out["ssl_cafile"] = _file(security.ssl_cafile, owner, "ssl_cafile")
        if security.ssl_certfile and security.ssl_keyfile:
            out["ssl_certfile"] = _file(security.ssl_certfile, owner, "ssl_certfile")
            out["ssl_keyfile"] = _file(security.ssl_keyfile, owner, "ssl_keyfile")
        if security.ssl_key_password_env:
            out["ssl_password"] = _env_secret(security.ssl_key_password_env, owner, "key password", environ)
    return out


# The Airflow Kafka provider's connection extra is a librdkafka (confluent-kafka) client config.
_IGNORED_KEYS = re.compile(
    r"(group\.id|auto\.offset\.reset|enable\.auto\.commit|session\.timeout\.ms|acks|linger\.ms|"
    r"compression\.type|retries|.*\.timeout\.ms|.*\.interval\.ms|socket\..*|queue\..*|fetch\..*|"
    r"message\..*|batch\..*|debug|error_cb|logger|stats_cb|statistics\.interval\.ms)"
)


def security_from_client_config(config: Mapping[str, Any], owner: str) -> tuple[str | None, dict[str, Any]]:
    """The bootstrap servers and kafka-python settings of a librdkafka-style config (an Airflow
    ``kafka`` connection's extra). Client behaviour (group, offsets, batching) stays the contract's;
    a security setting this client cannot honour is an error rather than a silent downgrade."""
    out: dict[str, Any] = {}
    get = {str(k): v for k, v in config.items()}
    protocol = str(get.pop("security.protocol", "PLAINTEXT")).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise KafkaClientError(
            f"{owner}: security.protocol {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    out["security_protocol"] = protocol
    mechanism = get.pop("sasl.mechanism", None) or get.pop("sasl.mechanisms", None)
    username, password = get.pop("sasl.username", None), get.pop("sasl.password", None)
    if protocol.startswith("SASL_"):
        mechanism = str(mechanism or "").upper()
        if mechanism not in SASL_MECHANISMS:
            raise KafkaClientError(
                f"{owner}: sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)} (got {mechanism!r})"
            )
        if not username or not password:
            raise KafkaClientError(f"{owner}: {protocol} needs sasl.username and sasl.password")
        out.update(
            sasl_mechanism=mechanism, sasl_plain_username=str(username), sasl_plain_password=str(password)
        )
    for key, name in (
        ("ssl.ca.location", "ssl_cafile"),
        ("ssl.certificate.location", "ssl_certfile"),
        ("ssl.key.location", "ssl_keyfile"),
    ):
        value = get.pop(key, None)
        if value:
            out[name] = _file(str(value), owner, key)
    key_password = get.pop("ssl.key.password", None)
    if key_password:
        out["ssl_password"] = str(key_password)
    verify = str(get.pop("enable.ssl.certificate.verification", "true")).lower() != "false"
    identify = str(get.pop("ssl.endpoint.identification.algorithm", "https")).lower()
    if protocol.endswith("SSL"):
        out["ssl_check_hostname"] = verify and identify != "none"
    client_id = get.pop("client.id", None)
    if client_id:
        out["client_id"] = str(client_id)
    servers = get.pop("bootstrap.servers", None)
    unsupported = sorted(k for k in get if k.startswith(("sasl.", "ssl.")) and not _IGNORED_KEYS.fullmatch(k))
    if unsupported:
        raise KafkaClientError(
            f"{owner}: unsupported security settings in the connection: {', '.join(unsupported)}"
        )
    return (str(servers) if servers else None), out


def client_config(source: KafkaSource, environ: Mapping[str, str] = os.environ) -> KafkaClient:
    """The source's client settings, resolved in this process: the password from its variable, an
    Airflow connection from the environment the operators set."""
    owner = f"source {source.name!r}"
    settings: dict[str, Any] = {}
    servers = source.bootstrap_servers
    described = "PLAINTEXT"
    if source.connection is not None:
        name = connection_env_name(source.connection)
        raw = environ.get(name)
        if not raw:
            raise KafkaClientError(
                f"{owner}: Airflow connection {source.connection!r} was not resolved in this process; run "
                f"the job from an Airflow task (the Primus operators resolve it) or set {name}"
            )
        try:
            config = json.loads(raw)
        except ValueError:
            raise KafkaClientError(f"{owner}: {name} is not a JSON object") from None
        if not isinstance(config, dict):
            raise KafkaClientError(f"{owner}: {name} is not a JSON object")
        found, settings = security_from_client_config(config, owner)
        servers = servers or found
        if not servers:
            raise KafkaClientError(
                f"{owner}: neither the source nor Airflow connection {source.connection!r} gives "
                "bootstrap servers (set bootstrap_servers, or bootstrap.servers in the connection's extra)"
            )
        described = f"{settings['security_protocol']} (Airflow connection {source.connection!r})"
    elif source.security is not None:
        settings = security_settings(source.security, owner, environ)
        described = source.security.describe()
    if source.client_id is not None:
        settings["client_id"] = source.client_id
    assert servers is not None  # the contract requires servers unless a connection gives them
    return KafkaClient(owner, servers, settings, described)


def tool_client(
    servers: str,
    security: KafkaSecurity | None = None,
    *,
    owner: str,
    environ: Mapping[str, str] = os.environ,
) -> KafkaClient:
    """Settings for a tool that is not reading a source (``primus gen``'s producer, a benchmark):
    the same security settings a source takes."""
    if security is None:
        return KafkaClient(owner, servers)
    return KafkaClient(owner, servers, security_settings(security, owner, environ), security.describe())


def kafka_client(target: KafkaTarget) -> KafkaClient:
    if isinstance(target, KafkaClient):
        return target
    if isinstance(target, KafkaSource):
        return client_config(target)
    servers = target if isinstance(target, str) else ",".join(target)
    return KafkaClient(f"Kafka at {servers}", servers)


# -- bounded authentication failures ---------------------------------------------------------------


class _AuthWatch(logging.Filter):
    """Collects the authentication and TLS failures kafka-python logs while clients bootstrap (from
    its own I/O thread: no other way to see them before its bootstrap times out)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.watchers: dict[int, list[BaseException]] = {}
        self.installed = False

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        found = [a for a in args if isinstance(a, BaseException) and (_permanent(a) or _dropped(a))]
        if found:
            with self.lock:
                for seen in self.watchers.values():
                    seen.append(found[0])
        return True


def _dropped(exc: BaseException) -> bool:
    """A connection the broker accepted (TCP and TLS) and then closed: what a SCRAM failure often
    looks like to kafka-python (the broker's error answer and its close race; the close wins). A
    broker that is down refuses connections instead."""
    return isinstance(exc, KafkaError) and "socket disconnected" in str(exc)


# Bootstrap attempts the broker closed, with no answer, before a SASL client's failure counts as
# refused credentials rather than an outage.
DROPS_MEANING_REFUSED = 3


def _permanent(exc: BaseException) -> bool:
    if isinstance(exc, (SaslAuthenticationFailedError, UnsupportedSaslMechanismError)):
        return True
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "Authentication failed" in text


_WATCH = _AuthWatch()


@contextmanager
def _watching(client: KafkaClient) -> Iterator[list[BaseException]]:
    seen: list[BaseException] = []
    if not client.secured:
        yield seen
        return
    with _WATCH.lock:
        if not _WATCH.installed:
            logging.getLogger("kafka.net.manager").addFilter(_WATCH)
            _WATCH.installed = True
        _WATCH.watchers[id(seen)] = seen
    try:
        yield seen
    finally:
        with _WATCH.lock:
            _WATCH.watchers.pop(id(seen), None)


def auth_error(client: KafkaClient, cause: BaseException) -> KafkaAuthError:
    """The error a refused client reports: whose settings, which servers, what the broker said."""
    return KafkaAuthError(
        f"{client.owner}: the Kafka cluster at {client.servers} refused the client ({client.described}): "
        f"{cause}; check the credentials and certificates"
    )


T = TypeVar("T")


def _make(factory: Callable[..., T], target: KafkaTarget, overrides: dict[str, Any]) -> T:
    client = kafka_client(target)
    with _watching(client) as seen:
        try:
            return factory(**client.kwargs(**overrides))
        except KafkaError as exc:
            if _permanent(exc):
                raise auth_error(client, exc) from None
            refused = [e for e in seen if _permanent(e)]
            if refused:
                raise auth_error(client, refused[-1]) from None
            drops = len(seen) - len(refused)
            if client.settings.get("sasl_mechanism") and drops >= DROPS_MEANING_REFUSED:
                raise auth_error(
                    client,
                    RuntimeError(
                        f"the broker accepted the connection and closed it during authentication "
                        f"{drops} times, never answering ({exc})"
                    ),
                ) from None
            raise


def consumer(target: KafkaTarget, **overrides: Any) -> Any:
    """A ``KafkaConsumer`` with the target's settings and ``overrides`` (group, timeouts, client id)."""
    from kafka import KafkaConsumer

    return _make(KafkaConsumer, target, overrides)


def producer(target: KafkaTarget, **overrides: Any) -> Any:
    from kafka import KafkaProducer

    return _make(KafkaProducer, target, overrides)


def admin_client(target: KafkaTarget, **overrides: Any) -> Any:
    from kafka import KafkaAdminClient

    return _make(KafkaAdminClient, target, overrides)


def permanent_failure(target: KafkaTarget, exc: BaseException) -> KafkaAuthError | None:
    """``exc`` as a :class:`KafkaAuthError` when it is an authentication or certificate failure met
    after a client was made (credentials revoked, a certificate changed), else None."""
    if isinstance(exc, KafkaAuthError):
        return exc
    if isinstance(exc, KafkaError) and _permanent(exc):
        return auth_error(kafka_client(target), exc)
    return None
