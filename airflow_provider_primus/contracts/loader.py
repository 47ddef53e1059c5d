"""Reading spec documents from disk, strictly.

Reading is where a silently ignored mistake would start: PyYAML keeps the last of two equal keys and
JSON parsers do the same, so both loaders here reject duplicate keys. Every failure, including a
missing file, is a ``SpecError`` so a caller has one exception to handle for "this spec is unusable".
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_primus.contracts.data import PrimusData, validate_data_spec
from airflow_provider_primus.contracts.errors import SpecError, SpecIssue
from airflow_provider_primus.contracts.job import PrimusJob, validate_job_spec
from airflow_provider_primus.contracts.training import PrimusTraining, validate_training_spec

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json",)


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_issue(label: str, exc: yaml.YAMLError) -> SpecIssue:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    if "duplicate key" in str(problem):
        return SpecIssue(label, f"YAML error at {where}{problem}; each key may appear once per mapping")
    detail = f"{problem} ({context})" if context else str(problem)
    return SpecIssue(label, f"YAML syntax error at {where}{detail}")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"found duplicate key {key!r}")
        out[key] = value
    return out


def read_document(path: str | Path) -> dict[str, Any]:
    """Parse a ``.yaml``/``.yml``/``.json`` file into its top-level mapping, without validating it."""
    path = Path(path)
    label = str(path)
    suffix = path.suffix.lower()
    if suffix not in YAML_SUFFIXES + JSON_SUFFIXES:
        raise SpecError([SpecIssue(label, "unsupported file type; use .yaml, .yml or .json")])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([SpecIssue(label, "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([SpecIssue(label, f"cannot read the file: {exc}")]) from None
    document: Any
    if suffix in JSON_SUFFIXES:
        try:
            document = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise SpecError(
                [SpecIssue(label, f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
            ) from None
        except ValueError as exc:
            raise SpecError([SpecIssue(label, f"JSON error: {exc}")]) from None
    else:
        try:
            document = yaml.load(
                text, Loader=_StrictYamlLoader
            )  # a SafeLoader subclass: no arbitrary objects
        except yaml.YAMLError as exc:
            raise SpecError([_yaml_issue(label, exc)]) from None
    if not isinstance(document, dict):
        got = "an empty document" if document is None else f"a {type(document).__name__}"
        raise SpecError([SpecIssue(label, f"the top level must be a mapping (got {got})")])
    return document


def load_data_spec(source: str | Path | Mapping[str, Any]) -> PrimusData:
    """A validated PrimusData from a file path or an already parsed mapping."""
    if isinstance(source, Mapping):
        return validate_data_spec(source)
    if not isinstance(source, str | Path):
        raise SpecError(
            [SpecIssue("<document>", f"expected a path or a mapping, got {type(source).__name__}")]
        )
    return validate_data_spec(read_document(source))


def load_training_spec(source: str | Path | Mapping[str, Any]) -> PrimusTraining:
    """A validated PrimusTraining from a file path or an already parsed mapping."""
    if isinstance(source, Mapping):
        return validate_training_spec(source)
    return validate_training_spec(read_document(source))


def validate_document(document: Mapping[str, Any]) -> PrimusData | PrimusTraining | PrimusJob:
    """Any kind of document, by its ``kind``, at any served version (a job's referenced documents are
    not read: ``master.jobs.load_job`` does that)."""
    kind = document.get("kind")
    if kind == "PrimusTraining":
        return validate_training_spec(document)
    if kind == "PrimusJob":
        return validate_job_spec(document)
    return validate_data_spec(document)  # whose own check names the kinds expected


def data_spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of a PrimusData document, keyed as written (``apiVersion``, ``schema``)."""
    return PrimusData.model_json_schema(by_alias=True)
