"""Where a source's rows come from: partitioned files or a Kafka topic, and their policies.

Separate from the schema (``schema.py``): the location, naming and start/missing/offset policies
change with storage and brokers, the features with the model.
"""

from __future__ import annotations

import re
import string
from datetime import UTC, datetime
from typing import Annotated, Literal
from urllib.parse import unquote

from pydantic import Field, Strict, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, SourceName, StrictModel, UtcDatetime, as_utc
from airflow_provider_primus.contracts.errors import raise_issues, suggest
from airflow_provider_primus.contracts.formats import AvroFormat, ProtobufFormat
from airflow_provider_primus.contracts.kafka import KafkaSecurity
from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.contracts.storage import ObjectStorage, storage_issues

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(?:\[(?P<ipv6>[0-9a-fA-F:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})")
PLACEHOLDERS = ("date", "year", "month", "day", "hour")

TopicName = Annotated[str, Field(json_schema_extra={"pattern": f"^{_TOPIC.pattern}$"})]


class MissingPolicy(StrictModel):
    """What a missing partition means: a broken pipeline (fail), a known gap (skip), or not yet (wait)."""

    policy: Literal["fail", "skip", "wait"] = "fail"
    timeout_s: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _timeout_only_when_waiting(self) -> MissingPolicy:
        # A timeout that can never apply is almost always a forgotten ``policy: wait``.
        if self.timeout_s is not None and self.policy != "wait":
            raise_issues([(("timeout_s",), f"only allowed with policy 'wait' (policy is {self.policy!r})")])
        return self


class StartPolicy(StrictModel):
    """Where a stream begins when no checkpoint says otherwise."""

    policy: Literal["committed", "earliest", "latest", "timestamp"]
    timestamp: UtcDatetime | None = None

    @model_validator(mode="after")
    def _timestamp_iff_timestamp_policy(self) -> StartPolicy:
        if self.policy == "timestamp" and self.timestamp is None:
            raise_issues([(("timestamp",), "required when policy is 'timestamp'")])
        if self.policy != "timestamp" and self.timestamp is not None:
            raise_issues(
                [(("timestamp",), f"only allowed with policy 'timestamp' (policy is {self.policy!r})")]
            )
        return self


def placeholders(template: str) -> list[str]:
    """The ``{name}`` fields of a path template; ``ValueError`` for malformed braces."""
    return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]


def _template_issues(template: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return [f"malformed template ({exc}); write literal braces as '{{{{' and '}}}}'"]
    problems: list[str] = []
    fields: set[str] = set()
    allowed = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in PLACEHOLDERS:
            hint = suggest(field, PLACEHOLDERS)
            problems.append(
                f"unknown placeholder {{{field}}}; allowed: {allowed}"
                + (f"; did you mean {{{hint}}}?" if hint else "")
            )
        elif spec or conversion:
            problems.append(f"placeholder {{{field}}} takes no format spec or conversion; it is zero-padded")
        fields.add(field)
    if "date" not in fields and not {"year", "month", "day"} <= fields:
        problems.append("needs a day-level placeholder: {date}, or all of {year}, {month} and {day}")
    if template.startswith("/"):
        problems.append("must be relative to uri (no leading '/')")
    # Placeholders render to digits and dashes only, so the literal text alone decides whether a
    # rendered folder can climb out of uri (into someone else's data, or anywhere on the machine).
    rendered = "".join(literal + ("0" if field is not None else "") for literal, field, _, _ in parsed)
    if climbs_out(rendered):
        problems.append("must stay inside uri: a '..' segment (or its percent-encoding) would leave it")
    return problems


def climbs_out(path: str) -> bool:
    """Whether ``path`` holds a ``..`` segment, also percent-encoded (``%2e%2e``, even twice): an
    object store or WebHDFS decodes what a local check reads literally, so both readings count."""
    seen = path
    for _ in range(3):  # %252e%252e is %2e%2e after one decode, '..' after two
        if ".." in seen.replace("\\", "/").split("/"):
            return True
        decoded = unquote(seen)
        if decoded == seen:
            return False
        seen = decoded
    return True  # still changing after three decodes: nobody names a folder like that on purpose


def root_uri(value: str) -> str:
    """A source's root URI, refused when it climbs: a '..' inside the root is either a typo or a way
    out of the data the contract names, and would only surface later, far from its cause."""
    if climbs_out(value.split("://", 1)[-1]):
        raise ValueError(f"must not contain a '..' segment (or its percent-encoding): {value!r}")
    return value


class FileSource(StrictModel):
    """Partitioned files under one root; the template maps a partition's start time to its folder."""

    name: SourceName
    type: Literal["files"]
    format: Literal["parquet", "csv", "jsonl"]
    uri: NonEmptyStr
    path_template: str
    granularity: Literal["day", "hour"]
    success_marker: NonEmptyStr | None = None
    missing: MissingPolicy = Field(default_factory=MissingPolicy)
    # How to reach an s3:// uri (endpoint, region, addressing, where the credentials come from);
    # without it an s3:// uri is AWS with the standard environment variables.
    storage: ObjectStorage | None = None
    schema_: SourceSchema = Field(alias="schema")

    @field_validator("uri")
    @classmethod
    def _uri_without_climbing(cls, value: str) -> str:
        return root_uri(value)

    @field_validator("path_template")
    @classmethod
    def _template_well_formed(cls, value: str) -> str:
        problems = _template_issues(value)
        if problems:
            raise_issues([((), p) for p in problems])
        return value

    @model_validator(mode="after")
    def _storage_fits_uri(self) -> FileSource:
        problems = storage_issues(self.uri, self.storage)
        if problems:
            raise_issues([(("storage" if self.storage is not None else "uri",), p) for p in problems])
        return self

    @model_validator(mode="after")
    def _template_matches_granularity(self) -> FileSource:
        fields = set(placeholders(self.path_template))
        if self.granularity == "hour" and "hour" not in fields:
            raise_issues(
                [(("path_template",), "granularity 'hour' needs an {hour} placeholder in the template")]
            )
        if self.granularity == "day" and "hour" in fields:
            raise_issues(
                [
                    (
                        ("path_template",),
                        "granularity 'day' cannot use {hour}; use granularity 'hour' or drop {hour}",
                    )
                ]
            )
        return self

    def render_path(self, t: datetime) -> str:
        """The partition folder, relative to ``uri``, of the partition that starts at ``t``."""
        t = as_utc(t)
        return self.path_template.format(
            date=f"{t.year:04d}-{t.month:02d}-{t.day:02d}",
            year=f"{t.year:04d}",
            month=f"{t.month:02d}",
            day=f"{t.day:02d}",
            hour=f"{t.hour:02d}",
        )

    def columns(self) -> list[str]:
        return self.schema_.columns()

    def where(self) -> str:
        """Where the rows are, for messages."""
        return self.uri


# How far ahead of the wall clock a stream event may be stamped: producers' clocks drift by seconds to
# minutes, an hour covers a wrong time zone; beyond it the stamp is wrong, not early.
DEFAULT_MAX_AHEAD_S = 3600.0
MAX_AHEAD_S_LIMIT = 366 * 86_400.0  # a year: more is not clock skew, it is a disabled check
# The floor: no stream of today holds events from before 2000; 0 (1970) is the usual stand-in for a
# missing or mis-scaled stamp.
DEFAULT_MIN_EVENT_TIME = datetime(2000, 1, 1, tzinfo=UTC)


class EventTimePolicy(StrictModel):
    """Which stream event times are believed, and what becomes of the others.

    One event stamped decades ahead would otherwise become the watermark for the rest of the job
    (the watermark is the newest event time trained), breaking freshness, the guard and every window
    after it. An event more than ``max_ahead_s`` ahead of the wall clock when it is decoded, or before
    ``min_event_time``, is out of policy: ``dead_letter`` (the default) sends it to the dead-letter
    topic with the reason, like a malformed message; ``clamp`` trains it with its time moved to the
    nearest bound (now + ``max_ahead_s``, or ``min_event_time``)."""

    max_ahead_s: Annotated[float, Strict(), Field(gt=0, le=MAX_AHEAD_S_LIMIT, allow_inf_nan=False)] = (
        DEFAULT_MAX_AHEAD_S
    )
    min_event_time: UtcDatetime = DEFAULT_MIN_EVENT_TIME
    action: Literal["dead_letter", "clamp"] = "dead_letter"

    @property
    def min_event_time_ms(self) -> int:
        return int(self.min_event_time.timestamp() * 1000)

    @property
    def max_ahead_ms(self) -> int:
        return int(self.max_ahead_s * 1000)


class KafkaSource(StrictModel):
    """A topic read as a stream; its event-time field drives watermarks and freshness."""

    name: SourceName
    type: Literal["kafka"]
    # Required unless ``connection`` names an Airflow connection whose extra has bootstrap.servers.
    bootstrap_servers: str | None = None
    topic: TopicName
    # How message values are encoded: JSON objects (one per message), Avro (a schema file, or the
    # Confluent wire format resolved through a schema registry) or Protobuf (a descriptor set and
    # a message name). ``avro``/``protobuf`` hold the settings of the format chosen, and only it.
    value_format: Literal["json", "avro", "protobuf"] = "json"
    avro: AvroFormat | None = None
    protobuf: ProtobufFormat | None = None
    event_time_field: NonEmptyStr
    start: StartPolicy
    group_id: NonEmptyStr | None = None
    # Where malformed events go, with the reason in their headers; default "<topic>.dlq".
    dead_letter_topic: TopicName | None = None
    # What a trainer does when the offset it must resume from is not in the partition any more
    # (retention deleted it, the topic or the broker's data was recreated): stop with a clear error,
    # or go on from the partition's earliest or latest offset with the records skipped counted in
    # the job's events and status. Never a silent jump.
    offset_reset: Literal["fail", "earliest", "latest"] = "fail"
    # How every client of this source reaches a secured cluster (the stream, offset commits, the
    # dead-letter producer, the planner): protocol, SASL user, the *name* of the password's variable,
    # TLS files. Or ``connection``: an Airflow ``kafka`` connection id whose extra is the client config
    # (resolved by the operators when a DAG runs the job). Never both.
    security: KafkaSecurity | None = None
    connection: NonEmptyStr | None = None
    client_id: NonEmptyStr | None = None  # default: primus-<role>-<source>, per client
    # Which event times are believed (not too far ahead of now, not before a floor), and whether the
    # others are dead-lettered or clamped: the watermark only moves with believed ones.
    event_time_policy: EventTimePolicy = Field(default_factory=EventTimePolicy)
    schema_: SourceSchema = Field(alias="schema")

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_parse(cls, value: str | None) -> str | None:
        if value is None:
            return value
        bad = []
        for entry in value.split(","):
            match = _HOST_PORT.fullmatch(entry.strip())
            if match is None or not 1 <= int(match["port"]) <= 65535:
                bad.append(repr(entry.strip()))
        if bad:
            raise ValueError(
                "must be a comma-separated list of host:port with port 1-65535; "
                f"bad entries: {', '.join(bad)}"
            )
        return value

    @field_validator("topic", "dead_letter_topic")
    @classmethod
    def _topic_legal(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not _TOPIC.fullmatch(value) or value in (".", ".."):
            raise ValueError(
                f"must be a Kafka topic name: 1-249 of letters, digits, '.', '_', '-', "
                f"and not '.' or '..' (got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _one_place_for_client_settings(self) -> KafkaSource:
        if self.connection is not None and self.security is not None:
            raise_issues(
                [
                    (
                        ("security",),
                        f"not allowed with 'connection': Airflow connection {self.connection!r} carries "
                        "the client settings (its extra); drop one of them",
                    )
                ]
            )
        if self.bootstrap_servers is None and self.connection is None:
            raise_issues(
                [(("bootstrap_servers",), "required (unless 'connection' names an Airflow kafka connection)")]
            )
        return self

    @model_validator(mode="after")
    def _format_settings_match(self) -> KafkaSource:
        issues: list[tuple[tuple[str, ...], str]] = []
        for name in ("avro", "protobuf"):
            given = getattr(self, name) is not None
            if self.value_format == name and not given:
                issues.append(((name,), f"required with value_format {name!r}"))
            elif self.value_format != name and given:
                issues.append(
                    (
                        (name,),
                        f"only allowed with value_format {name!r} (value_format is {self.value_format!r})",
                    )
                )
        if issues:
            raise_issues(issues)
        return self

    @model_validator(mode="after")
    def _stream_never_fails_on_a_message(self) -> KafkaSource:
        # A stream must not stop on one incomplete event: a message without a label is always
        # dead-lettered (the stream's "drop and count"), so ``fail`` could never apply here.
        if self.schema_.missing_label == "fail":
            raise_issues(
                [
                    (
                        ("schema", "missing_label"),
                        "'fail' applies to files sources only; a stream dead-letters a message without "
                        "a label instead of stopping (use 'drop', the default)",
                    )
                ]
            )
        return self

    def servers(self) -> list[str]:
        """``bootstrap_servers`` as the list Kafka clients take (empty when a connection gives them:
        clients are made from ``data/sources/kafka_client.py``, which resolves it)."""
        return [entry.strip() for entry in (self.bootstrap_servers or "").split(",") if entry.strip()]

    def where(self) -> str:
        """The servers, or the connection that names them, for messages."""
        return self.bootstrap_servers or f"(Airflow connection {self.connection!r})"

    def columns(self) -> list[str]:
        return self.schema_.columns()
