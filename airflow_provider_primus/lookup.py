"""Reading a stored job status defensively: whatever a master (of any version, or one that has not
written yet) left in the store must be readable, so every lookup tolerates a missing key or a value
of an unexpected type. Core (the master's history, the metrics) and the pages share these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["as_map", "num"]


def num(value: Any) -> float | None:
    """A number as float; None for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
