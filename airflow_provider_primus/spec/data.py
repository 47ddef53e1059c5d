"""PrimusData: what a job reads, as a strict, frozen model.

Strict because the anti-anchor (bytedance/primus) ignored configuration typos: a misspelled key here
is an error with a suggestion, never a silently applied default. Frozen because the planner derives
task IDs from the spec's content and must not see it change underneath. Cross-field checks live on
the smallest model that holds both fields, so they still run (and report) when an unrelated part of
the document is broken.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from airflow_provider_primus.spec.errors import (
    Loc,
    SpecError,
    SpecIssue,
    format_path,
    issues_from_validation_error,
    raise_issues,
    suggest,
)

API_VERSION = "primus.dev/v1alpha1"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9_]*[a-z0-9])?")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(?:\[(?P<ipv6>[0-9a-fA-F:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})")
_RULE = re.compile(
    r"\s*(?P<column>[^\s<>=!]+)\s*(?P<op>>=|<=|==|!=|>|<)\s*"
    r"(?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*"
)
PLACEHOLDERS = ("date", "year", "month", "day", "hour")
RULE_OPS = (">=", ">", "<=", "<", "==", "!=")

RuleOp = Literal[">=", ">", "<=", "<", "==", "!="]


def _as_utc(value: datetime) -> datetime:
    """Naive times are taken as UTC: a window must mean the same hours on every machine."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
            f"letter or digit, at most 63 characters (got {value!r})"
        )
    return value


def _source_name(value: str) -> str:
    if len(value) > 63 or not _SOURCE_NAME.fullmatch(value):
        raise ValueError(
            f"must be lowercase letters, digits, '-' and '_', starting and ending with a letter or "
            f"digit, at most 63 characters (got {value!r})"
        )
    return value


def _column_name(value: str) -> str:
    if not value or value.strip() != value:
        raise ValueError(f"must be a non-empty column name without surrounding spaces (got {value!r})")
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
# The patterns are repeated into the JSON Schema so a CRD rejects what the validators reject.
Name = Annotated[
    str,
    AfterValidator(_dns_label),
    Field(json_schema_extra={"pattern": f"^{_DNS_LABEL.pattern}$", "maxLength": 63}),
]
SourceName = Annotated[
    str,
    AfterValidator(_source_name),
    Field(json_schema_extra={"pattern": f"^{_SOURCE_NAME.pattern}$", "maxLength": 63}),
]
ColumnName = Annotated[str, AfterValidator(_column_name)]
TopicName = Annotated[str, Field(json_schema_extra={"pattern": f"^{_TOPIC.pattern}$"})]
NonEmptyStr = Annotated[str, AfterValidator(_non_empty), Field(json_schema_extra={"minLength": 1})]
# Strict so that YAML's ``true`` is not quietly read as 1 worker or a weight of 1.0.
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]


class StrictModel(BaseModel):
    """Unknown keys are errors and validated specs never change: the base of every contract model."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Metadata(StrictModel):
    """Kubernetes-shaped so the same document can later be applied as a custom resource."""

    name: Name


class Window(StrictModel):
    """A planned historical time range, half-open [start, end), always in UTC."""

    start: UtcDatetime
    end: UtcDatetime

    @model_validator(mode="after")
    def _end_after_start(self) -> Window:
        if self.end <= self.start:
            raise_issues(
                [(("end",), f"must be after start ({self.start.isoformat()}), got {self.end.isoformat()}")]
            )
        return self


class Planning(StrictModel):
    """How the planner sizes tasks. ``workers`` is a thread count for I/O round trips (listings,
    footers), not CPUs: on an object store each call waits ~20 ms, so many threads overlap them."""

    target_rows_per_task: PositiveInt = 100_000
    min_rows_per_task: PositiveInt = 10_000
    workers: PositiveInt = 64

    @model_validator(mode="after")
    def _min_not_above_target(self) -> Planning:
        if self.min_rows_per_task > self.target_rows_per_task:
            raise_issues(
                [
                    (
                        ("min_rows_per_task",),
                        f"must not exceed target_rows_per_task ({self.target_rows_per_task})",
                    )
                ]
            )
        return self


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


def _label_schema(schema: dict[str, Any]) -> None:
    """Describe what an author writes ({column} or {rule}), not the parsed op/value we keep."""
    schema["properties"] = {
        "column": {"type": "string", "minLength": 1, "description": "a column that already holds 0/1"},
        "rule": {
            "type": "string",
            "description": "'<column> <op> <number>' with op one of " + ", ".join(RULE_OPS),
        },
    }
    schema.pop("required", None)
    schema["oneOf"] = [{"required": ["column"]}, {"required": ["rule"]}]


class Label(StrictModel):
    """The training target: an existing column, or a threshold rule parsed once, here.

    Parsing at validation time means a bad rule fails before any data is read, and batch and stream
    readers apply the same (column, op, value) instead of each parsing the text.
    """

    model_config = ConfigDict(json_schema_extra=_label_schema)

    column: ColumnName
    op: RuleOp | None = None
    value: float | None = None
    rule: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse_rule(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        issues: list[tuple[Loc, str]] = []
        for key in data:
            if key not in ("column", "rule"):
                hint = suggest(str(key), ["column", "rule"])
                issues.append(
                    (
                        (str(key),),
                        f"unknown field; did you mean {hint!r}?"
                        if hint
                        else "unknown field; valid fields are: column, rule",
                    )
                )
        column, rule = data.get("column"), data.get("rule")
        if column is not None and rule is not None:
            issues.append(((), "give exactly one of 'column' or 'rule', not both"))
        elif column is None and rule is None and not issues:  # an unknown key is likely the label, misspelt
            issues.append(
                ((), "must define the label: {column: <0/1 column>} or {rule: '<column> <op> <number>'}")
            )
        parsed: dict[str, Any] = {"column": column}
        if rule is not None and column is None:
            match = _RULE.fullmatch(rule) if isinstance(rule, str) else None
            if match is None:
                issues.append(
                    (
                        ("rule",),
                        f"must look like '<column> <op> <number>' with op one of {', '.join(RULE_OPS)} "
                        f"(got {rule!r})",
                    )
                )
            else:
                parsed = {
                    "column": match["column"],
                    "op": match["op"],
                    "value": float(match["value"]),
                    "rule": rule,
                }
        if issues:
            raise_issues(issues)
        return parsed

    @model_serializer(mode="plain")
    def _as_written(self) -> dict[str, Any]:
        # Dump the form the author wrote, so a dumped spec validates again.
        return {"rule": self.rule} if self.rule is not None else {"column": self.column}


_TRANSFORM_KINDS = ("hash_bucket", "fill", "cast")


class Transform(StrictModel):
    """One step applied, in list order, by both the batch and the stream reader of a source."""

    column: ColumnName
    hash_bucket: Annotated[int, Strict(), Field(ge=2)] | None = None
    fill: int | float | str | None = None
    cast: Literal["int32", "int64", "float32", "float64", "string"] | None = None

    @field_validator("fill", mode="before")
    @classmethod
    def _fill_is_scalar(cls, value: Any) -> Any:
        # Checked up front: pydantic would otherwise report one error per member of the union.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float | str)):
            raise ValueError(f"must be a number or a string (got {value!r})")
        return value

    @property
    def kind(self) -> Literal["hash_bucket", "fill", "cast"]:
        if self.hash_bucket is not None:
            return "hash_bucket"
        return "fill" if self.fill is not None else "cast"

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Transform:
        given = [k for k in _TRANSFORM_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            kinds = ", ".join(repr(k) for k in _TRANSFORM_KINDS)
            found = f"got {', '.join(repr(k) for k in given)}" if given else "got none"
            raise_issues([((), f"give exactly one of {kinds} ({found})")])
        return self


class SourceSchema(StrictModel):
    """Declared once per source so batch and stream read and transform the same features."""

    sparse: list[ColumnName] = Field(default_factory=list)
    dense: list[ColumnName] = Field(default_factory=list)
    label: Label
    event_time: ColumnName | None = None
    transforms: list[Transform] = Field(default_factory=list)
    # A row whose label is null (or NaN, or null input to a rule) has no target: training it as 0
    # would invent a negative. ``drop`` leaves it out and counts it per task; ``fail`` fails the
    # task like a read error. A ``fill`` on the label column declares a value and takes precedence.
    missing_label: Literal["drop", "fail"] = "drop"

    def columns(self) -> list[str]:
        """The columns a reader must fetch: features, then label, then event time, each once."""
        wanted = [*self.sparse, *self.dense, self.label.column]
        if self.event_time is not None:
            wanted.append(self.event_time)
        return list(dict.fromkeys(wanted))

    @model_validator(mode="after")
    def _columns_consistent(self) -> SourceSchema:
        issues: list[tuple[Loc, str]] = []
        seen: dict[str, str] = {}
        for group, names in (("sparse", self.sparse), ("dense", self.dense)):
            for i, name in enumerate(names):
                if name in seen:
                    issues.append(
                        ((group, i), f"column {name!r} is listed more than once (first at {seen[name]})")
                    )
                else:
                    seen[name] = f"{group}[{i}]"
        known = self.columns()
        for i, transform in enumerate(self.transforms):
            if transform.column not in known:
                message = (
                    f"unknown column {transform.column!r}; a transform must name a column declared in "
                    f"sparse, dense, label or event_time"
                )
                hint = suggest(transform.column, known)
                issues.append(
                    (("transforms", i, "column"), message + (f"; did you mean {hint!r}?" if hint else ""))
                )
            elif transform.hash_bucket is not None and transform.column not in self.sparse:
                issues.append(
                    (
                        ("transforms", i, "hash_bucket"),
                        f"only sparse columns can be hash-bucketed; {transform.column!r} is not in sparse",
                    )
                )
        if issues:
            raise_issues(issues)
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
    if ".." in rendered.replace("\\", "/").split("/"):
        problems.append("must stay inside uri: a '..' segment would leave it")
    return problems


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
    schema_: SourceSchema = Field(alias="schema")

    @field_validator("path_template")
    @classmethod
    def _template_well_formed(cls, value: str) -> str:
        problems = _template_issues(value)
        if problems:
            raise_issues([((), p) for p in problems])
        return value

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
        t = _as_utc(t)
        return self.path_template.format(
            date=f"{t.year:04d}-{t.month:02d}-{t.day:02d}",
            year=f"{t.year:04d}",
            month=f"{t.month:02d}",
            day=f"{t.day:02d}",
            hour=f"{t.hour:02d}",
        )

    def columns(self) -> list[str]:
        return self.schema_.columns()


class KafkaSource(StrictModel):
    """A topic read as a stream; its event-time field drives watermarks and freshness."""

    name: SourceName
    type: Literal["kafka"]
    bootstrap_servers: str
    topic: TopicName
    value_format: Literal["json"] = "json"
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
    schema_: SourceSchema = Field(alias="schema")

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_parse(cls, value: str) -> str:
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
        """``bootstrap_servers`` as the list Kafka clients take."""
        return [entry.strip() for entry in self.bootstrap_servers.split(",")]

    def columns(self) -> list[str]:
        return self.schema_.columns()


Source = Annotated[FileSource | KafkaSource, Field(discriminator="type")]


def _reference_issues(
    names: Sequence[tuple[int, str]], refs: Sequence[tuple[int, str]]
) -> list[tuple[Loc, str]]:
    """Source-name checks, shared by the model and by the raw-document pass in ``validate_data_spec``."""
    issues: list[tuple[Loc, str]] = []
    first: dict[str, int] = {}
    for i, name in names:
        if name in first:
            issues.append(
                (("sources", i, "name"), f"duplicate source name {name!r} (also sources[{first[name]}])")
            )
        else:
            first[name] = i
    known = list(first)
    used: dict[str, int] = {}
    for i, ref in refs:
        if ref not in first:
            hint = suggest(ref, known)
            message = f"unknown source {ref!r}; known sources: {', '.join(known) or 'none'}"
            issues.append((("mixture", i, "source"), message + (f"; did you mean {hint!r}?" if hint else "")))
        elif ref in used:
            issues.append(
                (
                    ("mixture", i, "source"),
                    f"source {ref!r} appears twice in the mixture (also mixture[{used[ref]}])",
                )
            )
        else:
            used[ref] = i
    return issues


class MixtureEntry(StrictModel):
    """A source's share of training: relative weight, and priority (higher is served first)."""

    source: str
    weight: PositiveFloat
    priority: Annotated[int, Strict(), Field(ge=0)] = 0


class Spec(StrictModel):
    """The sources to read, optionally a window and a mixture across them."""

    window: Window | None = None
    ordered: Annotated[bool, Strict()] = False
    planning: Planning = Field(default_factory=Planning)
    sources: list[Source] = Field(min_length=1)
    mixture: list[MixtureEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references_resolve(self) -> Spec:
        issues = _reference_issues(
            list(enumerate(s.name for s in self.sources)), list(enumerate(m.source for m in self.mixture))
        )
        if issues:
            raise_issues(issues)
        return self

    def source(self, name: str) -> FileSource | KafkaSource:
        for candidate in self.sources:
            if candidate.name == name:
                return candidate
        known = ", ".join(s.name for s in self.sources)
        raise KeyError(f"unknown source {name!r}; known sources: {known}")


class PrimusData(StrictModel):
    """The PrimusData document: ``apiVersion``/``kind`` pin the contract a file was written against."""

    api_version: Literal["primus.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["PrimusData"]
    metadata: Metadata
    spec: Spec


def validate_data_spec(document: Mapping[str, Any]) -> PrimusData:
    """Validate a parsed document, raising ``SpecError`` with every problem found.

    Pydantic skips a model's cross-field checks when one of its fields is invalid, so a broken source
    would hide an unknown mixture reference. The name checks are cheap and need only the names, so
    they are repeated on the raw document; duplicates of what the model already reported are merged.
    """
    try:
        return PrimusData.model_validate(document)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, PrimusData)
        issues += [
            SpecIssue(format_path(("spec", *loc)), message)
            for loc, message in _raw_reference_issues(document)
        ]
        raise SpecError(issues) from None


def _raw_reference_issues(document: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    spec = document.get("spec") if isinstance(document, Mapping) else None
    if not isinstance(spec, Mapping):
        return []

    def keyed(items: Any, key: str) -> list[tuple[int, str]]:
        if not isinstance(items, list):
            return []
        return [
            (i, item[key])
            for i, item in enumerate(items)
            if isinstance(item, Mapping) and isinstance(item.get(key), str)
        ]

    sources = spec.get("sources")
    if not isinstance(sources, list) or not sources:
        return []  # nothing to resolve against; "sources" itself is already reported
    return _reference_issues(keyed(sources, "name"), keyed(spec.get("mixture"), "source"))
