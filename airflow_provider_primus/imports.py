"""User code named as ``package.module:attribute`` (a model factory, a transform function): importing
it here, and reading the one JSON answer of a child process that imported it elsewhere.

Standard library only, beside ``errors``: the data layer (transform functions) and the training layer
(model factories) both load user code, with one set of messages.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from airflow_provider_primus.errors import PrimusError, one_line

__all__ = ["CallableImportError", "import_callable", "last_json_line"]


class CallableImportError(PrimusError):
    """What ``import_callable`` could not do, said for a message (callers wrap it in their own)."""


def import_callable(name: str, what: str = "callable") -> Any:
    """The callable ``package.module:attribute`` names (the attribute may be dotted), imported in
    this process; ``CallableImportError`` says why not (``what`` names the kind in the message)."""
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised while importing
        raise CallableImportError(f"cannot import {module_name!r}: {one_line(exc)}") from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CallableImportError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise CallableImportError(f"{name!r} is a {type(target).__name__}, not a {what}")
    return target


def last_json_line(text: str) -> dict[str, Any] | None:
    """A child's answer: its last line that is a JSON object (whatever the user's code printed
    comes before it)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None
