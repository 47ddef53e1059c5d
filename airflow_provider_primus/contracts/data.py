"""PrimusData: what a job reads, as a strict, frozen model.

Strict because the anti-anchor (bytedance/primus) ignored configuration typos: a misspelled key here
is an error with a suggestion, never a silently applied default. Frozen because the planner derives
task IDs from the spec's content and must not see it change underneath. Cross-field checks live on
the smallest model that holds both fields, so they still run (and report) when an unrelated part of
the document is broken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import Field, Strict, ValidationError, model_validator

from airflow_provider_primus.contracts.base import (
    Metadata,
    PositiveFloat,
    RowCount,
    StrictModel,
    ThreadCount,
    UtcDatetime,
)
from airflow_provider_primus.contracts.errors import (
    Loc,
    SpecError,
    SpecIssue,
    format_path,
    issues_from_validation_error,
    raise_issues,
    suggest,
)
from airflow_provider_primus.contracts.sources import FileSource, KafkaSource
from airflow_provider_primus.contracts.tables import DeltaSource, IcebergSource
from airflow_provider_primus.contracts.versions import to_hub

API_VERSION = "primus.dev/v1alpha1"

Source = Annotated[FileSource | IcebergSource | DeltaSource | KafkaSource, Field(discriminator="type")]
# Bounded sources the planner turns into windows of tasks (the data service serves them); Kafka
# sources are the trainers' own streams.
HistorySource = FileSource | IcebergSource | DeltaSource
HISTORY_TYPES = (FileSource, IcebergSource, DeltaSource)


def is_history(source: object) -> TypeGuard[HistorySource]:
    """Whether the planner plans the source into windows (files, tables), not a stream."""
    return isinstance(source, HISTORY_TYPES)


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

    target_rows_per_task: RowCount = 100_000
    min_rows_per_task: RowCount = 10_000
    workers: ThreadCount = 64

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

    def source(self, name: str) -> FileSource | IcebergSource | DeltaSource | KafkaSource:
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


def files_subset(data: PrimusData, names: Sequence[str] | None = None) -> PrimusData:
    """The document with only its files sources (those of ``names``, when given): what a job's data
    service plans. Kafka sources are the trainers' own streams, never tasks of the data service.
    Mixture entries of the sources kept stay (their priorities order the tasks)."""
    keep = [s for s in data.spec.sources if is_history(s) and (names is None or s.name in names)]
    kept = {s.name for s in keep}
    mixture = [m for m in data.spec.mixture if m.source in kept]
    spec = data.spec.model_copy(update={"sources": keep, "mixture": mixture})
    return data.model_copy(update={"spec": spec})


def window_source(data: PrimusData, source: str | None) -> str:
    """The files source a window appended to a running job reads: the one ``source`` names, which
    must be a files source of the data, or the data's only files source when it is left out."""
    files = [s.name for s in data.spec.sources if is_history(s)]
    kafka = [s.name for s in data.spec.sources if isinstance(s, KafkaSource)]
    if source is None:
        if len(files) == 1:
            return files[0]
        what = (
            f"name the files source this window belongs to (data {data.metadata.name!r} has "
            f"{len(files)}: {', '.join(files)})"
            if files
            else f"data {data.metadata.name!r} has no files source to append a window to"
        )
        raise SpecError([SpecIssue("source", what)])
    if source in files:
        return source
    if source in kafka:
        what = f"{source!r} is a kafka source; windows are appended to files sources ({', '.join(files)})"
    else:
        hint = suggest(source, files)
        what = f"no files source named {source!r} in data {data.metadata.name!r}" + (
            f"; did you mean {hint!r}?" if hint else f" (files sources: {', '.join(files) or 'none'})"
        )
    raise SpecError([SpecIssue("source", what)])


def validate_data_spec(document: Mapping[str, Any]) -> PrimusData:
    """Validate a parsed document, raising ``SpecError`` with every problem found.

    Pydantic skips a model's cross-field checks when one of its fields is invalid, so a broken source
    would hide an unknown mixture reference. The name checks are cheap and need only the names, so
    they are repeated on the raw document; duplicates of what the model already reported are merged.
    An older version of the contract is converted to the newest first (contracts/versions.py; today
    PrimusData has one version, so that changes nothing).
    """
    document, refused = to_hub(document, "PrimusData")
    try:
        data = PrimusData.model_validate(document)
    except ValidationError as exc:
        issues = refused + issues_from_validation_error(exc, PrimusData)
        issues += [
            SpecIssue(format_path(("spec", *loc)), message)
            for loc, message in _raw_reference_issues(document)
        ]
        raise SpecError(issues) from None
    if refused:
        raise SpecError(refused)
    return data


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
