"""The contract's versions and the conversions between them: pure functions on parsed documents.

A document pins the contract it was written against (``apiVersion: primus.dev/v1alpha1``). Teams keep
documents for years, so an older version is never dropped: every kind has one *hub* version (its
newest), which the models in this package describe and the job stores keep; an older document is
converted up to the hub on load, and the hub converts down on request (``primus convert``, the
Kubernetes apiserver reading a resource at an older version). Both directions are lossless: what an
older version cannot express is kept in an annotation (the Kubernetes convention), so a round trip
gives back the document it started from.

The registry is a list per kind of its versions, oldest first, and one ``Step`` per adjacent pair:
the next version is one more entry. Nothing here imports the models, so the models can import this.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_primus.contracts.errors import SpecError, SpecIssue

GROUP = "primus.dev"
# What v1alpha1 cannot say about a v1beta1 model (type python, entrypoint, options), as JSON.
MODEL_ANNOTATION = f"{GROUP}/v1beta1-model"
# The model protocol's fields: v1beta1 only.
PYTHON_MODEL_FIELDS = ("entrypoint", "options")

Document = dict[str, Any]


def api_version(version: str) -> str:
    """``v1beta1`` → ``primus.dev/v1beta1``."""
    return f"{GROUP}/{version}"


@dataclass(frozen=True)
class Step:
    """The conversion between two adjacent versions of a kind. ``refuse`` lists the fields of the
    newer version found in a document written as the older one: they are refused there, so an older
    document never changes meaning silently."""

    up: Callable[[Document], Document]
    down: Callable[[Document], Document]
    refuse: Callable[[Mapping[str, Any]], list[SpecIssue]]


def _retag(version: str) -> Callable[[Document], Document]:
    def retag(document: Document) -> Document:
        out = copy.deepcopy(document)
        out["apiVersion"] = api_version(version)
        return out

    return retag


def _nothing_refused(_document: Mapping[str, Any]) -> list[SpecIssue]:
    return []


def _model_of(document: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = document.get("spec")
    model = spec.get("model") if isinstance(spec, Mapping) else None
    return model if isinstance(model, Mapping) else {}


def _training_v1alpha1_refuses(document: Mapping[str, Any]) -> list[SpecIssue]:
    """The model protocol (``type: python``, ``entrypoint``, ``options``) is v1beta1's."""
    model = _model_of(document)
    hint = "set apiVersion: primus.dev/v1beta1 (or run `primus convert FILE --to v1beta1`)"
    issues = []
    if model.get("type") == "python":
        issues.append(
            SpecIssue("spec.model.type", f"python (your own model) needs primus.dev/v1beta1: {hint}")
        )
    for name in PYTHON_MODEL_FIELDS:
        if name in model:
            issues.append(SpecIssue(f"spec.model.{name}", f"is a primus.dev/v1beta1 field: {hint}"))
    return issues


def _training_up(document: Document) -> Document:
    """v1alpha1 → v1beta1: the same fields; a model kept in the annotation is put back."""
    out = _retag("v1beta1")(document)
    metadata = out.get("metadata")
    if not isinstance(metadata, dict):
        return out
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict) or MODEL_ANNOTATION not in annotations:
        return out
    path = f"metadata.annotations.{MODEL_ANNOTATION}"
    try:
        kept = json.loads(annotations[MODEL_ANNOTATION])
    except (TypeError, ValueError) as exc:
        raise SpecError([SpecIssue(path, f"is not the JSON `primus convert` writes: {exc}")]) from None
    if not isinstance(kept, dict) or not set(kept) <= {"type", *PYTHON_MODEL_FIELDS}:
        raise SpecError([SpecIssue(path, "must be a JSON object of type, entrypoint and options")])
    del annotations[MODEL_ANNOTATION]
    if not annotations:
        del metadata["annotations"]
    spec = out.setdefault("spec", {})
    if not isinstance(spec, dict) or not isinstance(spec.setdefault("model", {}), dict):
        raise SpecError([SpecIssue("spec.model", "must be a mapping")])
    spec["model"] = {**kept, **spec["model"]}
    return out


def _training_down(document: Document) -> Document:
    """v1beta1 → v1alpha1: the model protocol's fields move into the annotation, the rest is unchanged."""
    out = _retag("v1alpha1")(document)
    spec = out.get("spec")
    model = spec.get("model") if isinstance(spec, dict) else None
    if not isinstance(model, dict):
        return out
    kept = {name: model.pop(name) for name in PYTHON_MODEL_FIELDS if name in model}
    if model.get("type") == "python":
        kept = {"type": model.pop("type"), **kept}
    if kept:
        metadata = out.setdefault("metadata", {})
        annotations = metadata.setdefault("annotations", {})
        annotations[MODEL_ANNOTATION] = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    return out


# kind → its versions, oldest first; the last is the hub (what the models describe and stores keep).
VERSIONS: dict[str, tuple[str, ...]] = {
    "PrimusData": ("v1alpha1",),
    "PrimusTraining": ("v1alpha1", "v1beta1"),
    # The job kind's schema is the same in both; it moves with the training contract it references.
    "PrimusJob": ("v1alpha1", "v1beta1"),
}
# (kind, older version) → the step to the version after it.
STEPS: dict[tuple[str, str], Step] = {
    ("PrimusTraining", "v1alpha1"): Step(_training_up, _training_down, _training_v1alpha1_refuses),
    ("PrimusJob", "v1alpha1"): Step(_retag("v1beta1"), _retag("v1alpha1"), _nothing_refused),
}


# Annotations only a conversion down writes: at the hub they would be read back as fields on the way
# up and change the document, so a hub document may not carry them.
CONVERSION_ANNOTATIONS: dict[str, tuple[str, ...]] = {"PrimusTraining": (MODEL_ANNOTATION,)}


def _reserved(document: Mapping[str, Any], kind: str) -> list[SpecIssue]:
    metadata = document.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return []
    return [
        SpecIssue(
            f"metadata.annotations.{name}",
            f"is written by a conversion to an older version only; at {api_version(hub_version(kind))} "
            "the fields it keeps belong in spec",
        )
        for name in CONVERSION_ANNOTATIONS.get(kind, ())
        if name in annotations
    ]


def hub_version(kind: str) -> str:
    """The newest version of ``kind``: what its model describes and what a store keeps."""
    return VERSIONS[kind][-1]


def _version_of(document: Mapping[str, Any], kind: str) -> str | None:
    """The document's version of ``kind`` (``v1alpha1``), or None when it names no known one."""
    value = document.get("apiVersion")
    if not isinstance(value, str) or not value.startswith(f"{GROUP}/"):
        return None
    version = value.removeprefix(f"{GROUP}/")
    return version if version in VERSIONS[kind] else None


def _walk(document: Document, kind: str, start: str, target: str) -> Document:
    versions = VERSIONS[kind]
    at = versions.index(start)
    end = versions.index(target)
    while at < end:
        document = STEPS[(kind, versions[at])].up(document)
        at += 1
    while at > end:
        at -= 1
        document = STEPS[(kind, versions[at])].down(document)
    return document


def to_hub(document: Mapping[str, Any], kind: str) -> tuple[Any, list[SpecIssue]]:
    """The document at ``kind``'s hub version, for validation by the hub model, and the issues its own
    version raises (fields a newer version introduced, an apiVersion that is none of the kind's).

    A document that is not a mapping is returned as it is: the model then names what is wrong."""
    if not isinstance(document, Mapping):
        return document, []
    version = _version_of(document, kind)
    if version is None:
        if "apiVersion" not in document or len(VERSIONS[kind]) == 1:
            return dict(document), []  # the model reports a missing apiVersion, or the single one
        known = ", ".join(repr(api_version(v)) for v in VERSIONS[kind])
        issue = SpecIssue("apiVersion", f"must be one of {known} (got {document['apiVersion']!r})")
        return {**document, "apiVersion": api_version(hub_version(kind))}, [issue]
    # Only the document's own version refuses: the later steps see fields it does not have.
    if version == hub_version(kind):
        issues = _reserved(document, kind)
    else:
        issues = STEPS[(kind, version)].refuse(document)
    return _walk(copy.deepcopy(dict(document)), kind, version, hub_version(kind)), issues


def convert(document: Mapping[str, Any], to: str) -> Document:
    """``document`` at version ``to`` (``v1beta1`` or ``primus.dev/v1beta1``) of its own kind.

    Refuses, naming the field, a kind or version this registry does not know; the content is not
    validated here (the caller validates the hub form)."""
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in VERSIONS:
        raise SpecError([SpecIssue("kind", f"must be one of {', '.join(VERSIONS)} (got {kind!r})")])
    target = to.removeprefix(f"{GROUP}/")
    versions = VERSIONS[kind]
    if target not in versions:
        known = ", ".join(versions)
        raise SpecError([SpecIssue("apiVersion", f"{kind} has no version {to!r}; its versions: {known}")])
    start = _version_of(document, kind)
    if start is None:
        known = ", ".join(repr(api_version(v)) for v in versions)
        got = document.get("apiVersion")
        raise SpecError([SpecIssue("apiVersion", f"must be one of {known} (got {got!r})")])
    if start == hub_version(kind) and _reserved(document, kind):
        raise SpecError(_reserved(document, kind))
    return _walk(copy.deepcopy(dict(document)), kind, start, target)
