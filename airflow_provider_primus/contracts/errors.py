"""Spec errors that point at the document, not at the model.

Pydantic reports locations in terms of its own schema (union tags, Python attribute names, one error
per union branch) and in its own words. A person fixing a YAML file needs the YAML path, every problem
at once, and a hint for the likely typo, so everything pydantic raises is translated here. The
translation walks the model classes along each error location; it knows nothing about a particular
contract, so PrimusJob and the training section reuse it unchanged.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from airflow_provider_primus.errors import PrimusError

Loc = tuple[str | int, ...]

# The error type our validators raise when one check finds several problems, or a problem that belongs
# to a field other than the one being validated; ``ctx["issues"]`` holds (relative loc, message) pairs.
_ISSUES_ERROR = "primus_issues"


@dataclass(frozen=True)
class SpecIssue:
    """One problem, addressed the way the document's author writes it (``spec.sources[1].uri``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError, PrimusError):
    """Every problem found in a document, so one edit-and-rerun cycle can fix them all.

    A ``ValueError`` because a bad spec is a bad value: callers that validate user input already catch
    that, and Airflow shows its message in the task log.
    """

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues: list[SpecIssue] = _dedupe(issues)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)


def raise_issues(issues: Sequence[tuple[Loc, str]]) -> NoReturn:
    """Raise from inside a validator so pydantic keeps collecting errors elsewhere in the document.

    A plain ``ValueError`` can only blame the object being validated, with one message; cross-field
    checks want to blame the field that is wrong (``path_template``, not its source) and report all.
    """
    # The summary is what a caller of ``model_validate`` sees; SpecError expands ``issues`` instead.
    summary = "; ".join(f"{format_path(loc)}: {message}" if loc else message for loc, message in issues)
    raise PydanticCustomError(
        _ISSUES_ERROR,
        "{summary}",
        {"summary": summary, "issues": [(tuple(loc), message) for loc, message in issues]},
    )


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """The closest valid spelling, compared case-insensitively because ``apiversion`` is a typo too."""
    by_lower = {choice.lower(): choice for choice in choices}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def one_of(value: object, allowed: Sequence[str]) -> str:
    """The message for a value outside a fixed set: the set, and the nearest member when there is one."""
    message = f"{allowed_values(allowed)} (got {value!r})"
    hint = suggest(value, allowed) if isinstance(value, str) else None
    if hint is not None and len(allowed) > 1:
        message += f"; did you mean {hint!r}?"
    return message


def allowed_values(allowed: Sequence[str]) -> str:
    quoted = ", ".join(repr(a) for a in allowed)
    return f"must be {quoted}" if len(allowed) == 1 else f"must be one of {quoted}"


def format_path(parts: Sequence[str | int]) -> str:
    """``("spec", "sources", 1, "uri")`` → ``spec.sources[1].uri``; the empty path is the document."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<document>"


def issues_from_validation_error(exc: ValidationError, root: type[BaseModel]) -> list[SpecIssue]:
    """Translate every pydantic error of ``root.model_validate`` into document-addressed issues."""
    issues: list[SpecIssue] = []
    for error in exc.errors():
        loc: Loc = tuple(error["loc"])
        if error["type"] == _ISSUES_ERROR:
            for rel, message in error["ctx"]["issues"]:
                parts, _ = _walk(root, (*loc, *rel))
                issues.append(SpecIssue(format_path(parts), message))
            continue
        parts, target = _walk(root, loc)
        issues.append(_translate(error, parts, target))
    return _dedupe(issues)


def _dedupe(issues: Iterable[SpecIssue]) -> list[SpecIssue]:
    seen: dict[SpecIssue, None] = {}
    for issue in issues:
        seen.setdefault(issue, None)
    return list(seen)


@dataclass(frozen=True)
class _Target:
    """What the walk found at the end of a location: the field's type and the model that owns it."""

    annotation: Any
    owner: type[BaseModel] | None


def _walk(root: type[BaseModel], loc: Loc) -> tuple[list[str | int], _Target]:
    """Follow ``loc`` through the model classes, dropping the parts that exist only in pydantic.

    Discriminated unions put the tag into the location (``sources.0.files.uri``) and plain unions the
    branch name (``fill.int``); neither is in the document. Python attribute names become aliases.
    """
    parts: list[str | int] = []
    current: Any = root
    owner: type[BaseModel] | None = None
    for part in loc:
        current = _unwrap(current)
        if _is_model(current) and isinstance(part, str):
            owner = current
            field_name, alias, annotation = _field(current, part)
            parts.append(alias if field_name is not None else part)
            current = annotation
            continue
        if isinstance(part, int) and typing.get_origin(current) in (list, tuple):
            parts.append(part)
            args = typing.get_args(current)
            current = args[0] if args else None
            continue
        members = _union_members(current)
        if members and isinstance(part, str):
            tagged = [m for m in members if part in _tags(m)]
            if tagged:  # pydantic's discriminator step: choose the member, add nothing to the path
                current = tagged[0]
                continue
            holders = [m for m in members if _is_model(m) and _field(m, part)[0] is not None]
            if holders:  # our own relative locations skip the tag: the field decides the member
                owner = holders[0]
                _, alias, current = _field(owner, part)
                parts.append(alias)
                continue
            current = None  # a scalar union's branch name (``int``, ``str``): not in the document
            continue
        parts.append(part)
        current = None
    return parts, _Target(_unwrap(current), owner)


def _translate(error: Any, parts: list[str | int], target: _Target) -> SpecIssue:
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        names = _aliases(target.owner) if target.owner is not None else []
        unknown = str(parts[-1]) if parts else ""
        hint = suggest(unknown, names)
        if hint is not None:
            return SpecIssue(format_path(parts), f"unknown field; did you mean {hint!r}?")
        return SpecIssue(format_path(parts), f"unknown field; valid fields are: {', '.join(names)}")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        discriminator = str(ctx.get("discriminator", "type")).strip("'")
        allowed = sorted({tag for m in _union_members(target.annotation) for tag in _tags(m)})
        path = format_path([*parts, discriminator])
        if kind == "union_tag_not_found":
            return SpecIssue(path, f"required field is missing; {allowed_values(allowed)}")
        return SpecIssue(path, one_of(ctx.get("tag"), allowed))
    path = format_path(parts)
    literals = _literals(target.annotation)
    if kind == "literal_error":
        return SpecIssue(path, one_of(value, literals))
    if kind == "missing":
        if literals:
            return SpecIssue(path, f"required field is missing; {allowed_values(literals)}")
        return SpecIssue(path, "required field is missing")
    if kind == "value_error" and "error" in ctx:
        return SpecIssue(path, str(ctx["error"]))
    if kind in _MESSAGES:
        # ``gt=0`` on a float field reports 0.0; the author wrote 0.
        plain = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in ctx.items()}
        return SpecIssue(path, _MESSAGES[kind].format(**plain))
    if kind.startswith(("datetime_", "date_")):
        return SpecIssue(path, f"must be an ISO 8601 date-time such as 2026-11-01T00:00:00Z (got {value!r})")
    message = str(error.get("msg", kind))
    return SpecIssue(path, message[:1].lower() + message[1:])


_MESSAGES: dict[str, str] = {
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
}


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``X | None``: neither adds a step to pydantic's locations."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        members = _union_members(annotation)
        non_null = [m for m in members if m is not type(None)]
        if members and len(non_null) == 1:
            annotation = non_null[0]
            continue
        return annotation


def _union_members(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_strip_annotated(a) for a in typing.get_args(annotation)]
    return []


def _strip_annotated(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        return typing.get_args(annotation)[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field(model: type[BaseModel], key: str) -> tuple[str | None, str, Any]:
    # Only the alias: pydantic reports locations by alias, so a key equal to a Python attribute name
    # that differs from its alias (``api_version``) is an unknown key in the document.
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if key == alias:
            return name, alias, info.annotation
    return None, key, None


def _aliases(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


def _tags(model: Any) -> list[str]:
    """The discriminator values of a union member: the ``Literal`` values of its ``type`` field, else
    its ``union_tag``."""
    if not _is_model(model):
        return []
    info = model.model_fields.get("type")
    if info is not None:
        return _literals(info.annotation)
    tag = getattr(model, "union_tag", None)  # a member a callable discriminator tags by name
    return [tag] if isinstance(tag, str) else []


def _literals(annotation: Any) -> list[str]:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    return []
