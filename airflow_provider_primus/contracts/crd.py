"""The PrimusJob CustomResourceDefinition, generated from the same models that validate locally.

One contract, two validators: ``validate_job_spec`` checks a document on the user's machine, the
apiserver checks the custom resource with the OpenAPI v3 schema built here from the pydantic models
(types, enums, bounds, patterns, required fields; unknown fields are refused by strict field
validation) and CEL rules for the cross-field checks the models make in Python (replica order, at
least one trainer, vertical bounds around the request). Both report the same field paths.

The custom resource is the job document with two additions the master needs: ``spec.desired`` (the
runtime intent a person or the control API changes — the ``scale`` subresource writes
``spec.desired.scale.data``) and ``status`` (the master's view, written through the status
subresource only). This module is pure data: ``primus crd`` prints it, ``primus k8s install`` applies it.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from typing import Any

from airflow_provider_primus.contracts.job import TRAINER_MEMORY, PrimusJob, format_memory
from airflow_provider_primus.contracts.status import JobStatus
from airflow_provider_primus.contracts.versions import VERSIONS as kind_versions

GROUP = "primus.dev"
# Every served version shares one schema today (contracts/versions.py: the job kind's v1beta1 moves
# with the training contract it references); the newest is the one etcd stores.
VERSIONS = kind_versions["PrimusJob"]
VERSION = VERSIONS[-1]
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PrimusJob"
PLURAL = "primusjobs"
SINGULAR = "primusjob"
SHORT_NAMES = ["pj"]
CRD_NAME = f"{PLURAL}.{GROUP}"

_DROP = {"title", "default", "examples"}
# Defaults the CEL rules must assume where a field is absent (the models' defaults).
_DEFAULT_CPU = "1"
_ROLE_MEMORY = {"data": format_memory(2**30), "trainer": format_memory(TRAINER_MEMORY), "evaluator": "1Gi"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """JSON Schema 2020-12 as pydantic writes it → a Kubernetes structural OpenAPI v3 schema."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(branches) == 1:
            # Optional[X]: absent is "unset"; the apiserver prunes an explicit null of a field that is
            # not nullable, which reads the same (and keeps the CEL rules off null values).
            return _structural({**branches[0], **rest}, defs)
        raise ValueError(f"cannot express a union of {len(branches)} types in a structural schema")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "additionalProperties" and value is False:
            continue  # structural schemas forbid it; strict field validation refuses unknown fields
        if key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        else:
            # A copy: pydantic shares one ``required`` list among the uses of a model, which YAML
            # would print as anchors and aliases.
            out[key] = copy.deepcopy(value)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)  # int-or-string carries no type of its own
    return out


def _q(expr: str) -> str:
    return f"quantity(string({expr}))"


def _opt(obj: str, field: str, default: str) -> str:
    return f"(has({obj}.{field}) ? {obj}.{field} : {default})"


def _replicas_rules() -> list[dict[str, Any]]:
    mn = _opt("self", "min", "1")
    return [
        {
            "rule": f"!has(self.initial) || self.initial >= {mn}",
            "message": "must be at least min",
            "fieldPath": ".initial",
        },
        {
            "rule": f"!has(self.max) || "
            f"(self.max >= {mn} && (!has(self.initial) || self.max >= self.initial))",
            "message": "must be at least min and initial",
            "fieldPath": ".max",
        },
    ]


def _bounds_rules(role: str) -> list[dict[str, Any]]:
    """Vertical bounds around the request, per role because the default memory differs by role."""
    rules = []
    res = f"self.{role}.resources"
    for kind, default in (("cpu", _DEFAULT_CPU), ("memory", _ROLE_MEMORY[role])):
        request = f"(has({res}.{kind}) ? {_q(f'{res}.{kind}')} : quantity('{default}'))"
        for end, op, words in (("min", "<= 0", "must not exceed"), ("max", ">= 0", "must not be below")):
            bound = f"{res}.bounds.{kind}.{end}"
            guard = (
                f"!has(self.{role}) || !has({res}) || !has({res}.bounds) || "
                f"!has({res}.bounds.{kind}) || !has({bound})"
            )
            rules.append(
                {
                    "rule": f"{guard} || {_q(bound)}.compareTo({request}) {op}",
                    "message": f"{words} {kind}",
                    "fieldPath": f".{role}.resources.bounds.{kind}.{end}",
                }
            )
    return rules


def _trainer_rule() -> dict[str, Any]:
    r = "self.trainer.replicas"
    return {
        "rule": f"!has(self.trainer) || !has({r}) || !has({r}.min) || {r}.min >= 1",
        "message": "a job trains with at least 1 trainer",
        "fieldPath": ".trainer.replicas.min",
    }


def _quantity_rules(kind: str) -> list[dict[str, Any]]:
    if kind == "cpu":
        check = f"{_q('self')}.isGreaterThan(quantity('0')) && {_q('self')}.compareTo(quantity('1024')) <= 0"
        return [{"rule": check, "message": "must be more than 0 cores and at most 1024"}]
    return [{"rule": f"{_q('self')}.compareTo(quantity('16Mi')) >= 0", "message": "must be at least 16Mi"}]


_CPU_PATTERN = r"^([0-9]+m|[0-9]+(\.[0-9]+)?)$"
_MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|K|M|G|T)?$"


def _annotate(node: dict[str, Any], path: tuple[str, ...]) -> None:
    """Patterns and CEL rules the JSON Schema cannot carry, placed by the field's path in the spec."""
    props = node.get("properties", {})
    for name, sub in props.items():
        _annotate(sub, (*path, name))
    leaf = path[-1] if path else ""
    parent = path[-2] if len(path) > 1 else ""
    if node.get("x-kubernetes-int-or-string"):
        kind = "cpu" if leaf == "cpu" or parent == "cpu" else "memory"
        node["pattern"] = _CPU_PATTERN if kind == "cpu" else _MEMORY_PATTERN
        node["x-kubernetes-validations"] = _quantity_rules(kind)
    if leaf == "replicas" and "initial" in props:
        node["x-kubernetes-validations"] = _replicas_rules()
    if leaf == "roles":
        rules = [_trainer_rule()]
        for role in ("data", "trainer", "evaluator"):
            rules += _bounds_rules(role)
        node["x-kubernetes-validations"] = rules
    if path == ("spec",):
        node["x-kubernetes-validations"] = [
            {
                "rule": "!has(self.backend) || !has(self.backend.kubernetes) || "
                "(has(self.backend.type) && self.backend.type == 'kubernetes')",
                "message": "only allowed with backend.type 'kubernetes'",
                "fieldPath": ".backend.kubernetes",
            },
            {
                "rule": "!has(self.backend) || !has(self.backend.yarn) || "
                "(has(self.backend.type) && self.backend.type == 'yarn')",
                "message": "only allowed with backend.type 'yarn'",
                "fieldPath": ".backend.yarn",
            },
        ]


DESIRED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Runtime intent (scale, resize, windows, savepoints, suspend, stop); the master "
    "applies it. The scale subresource writes scale.data; scale.trainer regroups the trainers at a "
    "checkpoint.",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "scale": {
            "type": "object",
            "properties": {
                "data": {"type": "integer", "minimum": 0},
                # The trainers' count changes at a checkpoint (the group restarts with as many).
                "trainer": {"type": "integer", "minimum": 1},
            },
            "x-kubernetes-preserve-unknown-fields": True,
        },
        "suspend": {"type": "boolean"},
        "stop": {"type": "boolean"},
    },
}


def _free_form(node: Any) -> Any:
    """Free-form maps (``dict[str, Any]``: a trainer's figures, an event's extra data) keep what they
    hold: a structural schema says so with preserve-unknown-fields, not ``additionalProperties: true``."""
    if isinstance(node, list):
        return [_free_form(n) for n in node]
    if not isinstance(node, dict):
        return node
    # Nothing is required: the master writes whole statuses, and the apiserver prunes the nulls of
    # unset optional fields, which must not then read as a missing required field.
    out = {k: _free_form(v) for k, v in node.items() if k != "required"}
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _nullable(node: Any) -> Any:
    """``X | None`` as X with ``nullable: true``: a status carries its nulls (an executor's unknown
    exit code, a quarantined task's open end), where the spec's schema would rather prune them."""
    if isinstance(node, list):
        return [_nullable(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    branches = out.get("anyOf")
    if isinstance(branches, list) and any(b.get("type") == "null" for b in branches):
        others = [b for b in branches if b.get("type") != "null"]
        if len(others) == 1:
            del out["anyOf"]
            out = {**others[0], **out, "nullable": True}
    return out


def status_schema() -> dict[str, Any]:
    """``status``, from the same model the master writes and every reader reads (contracts/status.py).
    Unknown fields are kept: a newer master may write more than this version knows."""
    raw = _nullable(JobStatus.model_json_schema(by_alias=True, mode="serialization"))
    schema: dict[str, Any] = _free_form(_structural(copy.deepcopy(raw), raw.get("$defs", {})))
    schema.pop("$defs", None)
    schema["description"] = "Written by the master only (status subresource)."
    schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


STATUS_SCHEMA: dict[str, Any] = status_schema()


def openapi_schema() -> dict[str, Any]:
    """The schema of the custom resource: metadata is the apiserver's, spec is ours (plus desired)."""
    raw = PrimusJob.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    root = _structural(copy.deepcopy(raw), defs)
    spec = root["properties"]["spec"]
    _annotate(spec, ("spec",))
    spec["properties"]["desired"] = copy.deepcopy(DESIRED_SCHEMA)
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # A CRD may restrict metadata.name only; a job's name is a DNS label (it prefixes pods).
            "metadata": {
                "type": "object",
                "properties": {"name": root["properties"]["metadata"]["properties"]["name"]},
            },
            "spec": spec,
            "status": copy.deepcopy(STATUS_SCHEMA),
        },
    }


def served_version(version: str) -> dict[str, Any]:
    """One entry of the CRD's versions: served, stored when it is the newest."""
    return {
        "name": version,
        "served": True,
        "storage": version == VERSION,
        "schema": {"openAPIV3Schema": openapi_schema()},
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.desired.scale.data",
                "statusReplicasPath": ".status.replicas.data",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Roles", "type": "string", "jsonPath": ".status.roles"},
            {"name": "Data", "type": "integer", "jsonPath": ".status.replicas.data"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }


NO_CONVERSION: dict[str, Any] = {"strategy": "None"}


def webhook_conversion(
    ca_bundle: bytes, *, url: str | None = None, service: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``spec.conversion`` calling the project's webhook (kubernetes/conversion.py) at ``url`` (a
    webhook outside the cluster, reached by the apiserver's host) or ``service`` (``namespace``,
    ``name``, ``port``: in the cluster), trusting ``ca_bundle`` (PEM) for its certificate."""
    if (url is None) == (service is None):
        raise ValueError("a conversion webhook is reached by url or by service, one of them")
    client: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url is not None:
        client["url"] = url
    else:
        client["service"] = {**dict(service or {}), "path": "/convert"}
    return {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client},
    }


def crd(conversion: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The CRD; ``conversion`` is ``webhook_conversion(...)`` where a webhook is deployed, else the
    apiserver's own rewrite of apiVersion, which is lossless while every version has one schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "airflow-provider-primus"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["primus"],
            },
            "scope": "Namespaced",
            "versions": [served_version(version) for version in VERSIONS],
            "conversion": dict(conversion or NO_CONVERSION),
        },
    }
