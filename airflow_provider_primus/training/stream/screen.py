"""What a stream event must hold to be trained, checked on its JSON values before any decoding.

JSON states a type with every value, and Arrow's readers would otherwise turn a wrong one into a
plausible feature: a one-event table infers its types from that event alone, so the string ``"abc"``
in an integer ID column is simply hashed as a string, and a null label used to become 0. The rules
here are what the source's schema declares, per column:

- the label column: a number or a boolean, present and not null or NaN (else "missing label");
- sparse and event-time columns: present and not null;
- a dense or label column: a number or a boolean; a sparse column taken as final IDs: a number;
- an event-time column: an integer (counted in the schema's declared unit, milliseconds when none is
  declared) or an ISO 8601 string;
- a hash-bucketed sparse column: an integer or a string, and the same one throughout the stream,
  since the string ``"5"`` and the number ``5`` land in different buckets. Which one is learned from
  the stream (its first block that reads cleanly, else the block's majority) unless the schema
  declares it with a ``cast`` before ``hash_bucket``;
- a column whose first transform (after any ``fill``) is a ``cast``: any scalar; the cast decides
  per value, and a value it refuses makes the message malformed.

- a multi-hot column: an array (absent or null reads as an empty one) whose non-null items follow
  the rule a sparse column with the same transforms would (integers, or integers or strings when
  hash-bucketed, any scalar under a ``cast``).

Other nested values (objects, arrays) never fit a feature. Passthrough columns are carried as they
are.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from airflow_provider_primus.contracts.schema import SourceSchema

__all__ = ["EventRules", "arrow_kind", "json_kind"]

SCALARS = frozenset({"integer", "number", "boolean", "string"})
NUMERIC = frozenset({"integer", "number", "boolean"})
IDS = frozenset({"integer", "number"})
HASHABLE = frozenset({"integer", "string"})
EVENT_TIME = frozenset({"integer", "string"})
ARRAY = frozenset({"array"})

_ARTICLE = {"integer": "an integer", "array": "an array", "object": "an object"}


def json_kind(value: Any) -> str:
    """The JSON type of a decoded value (``json.loads`` output, or an Avro or Protobuf record's
    field), ints and floats told apart."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (bytes, bytearray)):  # an Avro ``bytes`` or Protobuf ``bytes`` field
        return "bytes"
    return "array"


def arrow_kind(typ: pa.DataType) -> str | None:
    """The JSON type an Arrow JSON reader's column was read from; None for a column of nulls only.

    Timestamps are strings that looked like ISO 8601 (pyarrow infers them); anything unrecognised is
    reported by its Arrow name, which no rule allows."""
    if pa.types.is_null(typ):
        return None
    if pa.types.is_boolean(typ):
        return "boolean"
    if pa.types.is_integer(typ):
        return "integer"
    if pa.types.is_floating(typ):
        return "number"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_timestamp(typ):
        return "string"
    if pa.types.is_struct(typ):
        return "object"
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return "array"
    return str(typ)


def _plural(kinds: frozenset[str]) -> str:
    return " or ".join(f"{k}s" for k in ("integer", "number", "boolean", "string") if k in kinds)


def _a(kind: str) -> str:
    return _ARTICLE.get(kind, f"a {kind}")


def _describe(kinds: Iterable[str]) -> str:
    order = ["integer", "number", "boolean", "string", "array"]
    names = [_a(k) for k in order if k in set(kinds)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class EventRules:
    """The schema's rules for one stream's events; the learned kinds of hash-bucketed ID columns are
    its only state (one instance per stream, used from its decode thread only)."""

    def __init__(self, schema: SourceSchema) -> None:
        self.label = schema.label.column
        event_time = [schema.event_time_column] if schema.event_time_column else []
        # Present and not null in every event (the label gets its own reason).
        # A column a python step creates (its ``outputs``) is not in the event: its function answers for it.
        produced = schema.produced()
        wanted = [c for c in [*schema.sparse, *event_time, self.label] if c not in produced]
        self.required: list[str] = list(dict.fromkeys(wanted))
        self.allowed: dict[str, frozenset[str]] = {}
        self.learned: set[str] = set()  # hash-bucketed IDs whose kind the stream itself decides
        self.pinned: dict[str, str] = {}
        # Multi-hot columns: the kinds their items may have (the column itself: an array).
        self.items: dict[str, frozenset[str]] = {}
        lists = set(schema.multi_hot_columns)
        for column in (c for c in schema.columns() if c not in produced):
            steps = [t for t in schema.column_steps if t.column == column and t.fill is None]
            first = steps[0] if steps else None
            if column in lists:
                self.allowed[column] = ARRAY
                hashed = first is not None and first.hash_bucket is not None
                cast = first is not None and first.cast is not None
                self.items[column] = SCALARS if cast else HASHABLE if hashed else IDS
                continue
            if first is not None and first.cast is not None:
                self.allowed[column] = SCALARS  # declared conversion: the cast judges each value
                continue
            allowed = SCALARS
            if column in schema.sparse:
                hashed = first is not None and first.hash_bucket is not None
                allowed &= HASHABLE if hashed else IDS
            if column in schema.dense or column == self.label:
                allowed &= NUMERIC
            if column == schema.event_time_column:
                allowed &= EVENT_TIME
            self.allowed[column] = allowed
            if allowed == HASHABLE:
                self.learned.add(column)

    def expected(self, column: str) -> frozenset[str]:
        pinned = self.pinned.get(column)
        return frozenset({pinned}) if pinned is not None else self.allowed[column]

    def problems(self, event: Mapping[str, Any]) -> list[str]:
        """Why the event cannot be trained, one reason per problem; empty when it can."""
        out: list[str] = []
        label = event.get(self.label)
        if self.label not in self.required:
            pass  # a python step creates the label: a row its output leaves without one is dropped later
        elif self.label not in event:
            out.append(f"missing label: field {self.label!r} is absent")
        elif label is None:
            out.append(f"missing label: field {self.label!r} is null")
        elif isinstance(label, float) and math.isnan(label):
            out.append(f"missing label: field {self.label!r} is NaN")
        missing = [c for c in self.required if c != self.label and event.get(c) is None]
        if missing:
            out.append(f"missing required field(s): {', '.join(missing)}")
        for column in self.allowed:
            value = event.get(column)
            if value is None:
                continue
            kind = json_kind(value)
            expected = self.expected(column)
            if kind not in expected:
                why = ""
                if column in self.pinned:
                    why = f" (this stream's {column!r} values are {self.pinned[column]}s)"
                out.append(
                    f"wrong type: field {column!r} is {_a(kind)} ({_show(value)}); the schema expects "
                    f"{_describe(expected)}{why}"
                )
            elif column in self.items:
                out.extend(self._item_problems(column, value))
        return out

    def _item_problems(self, column: str, values: list[Any]) -> list[str]:
        """The first item of a multi-hot array whose kind its column does not allow (per message:
        the slow path only; a block read as one table is judged by its type in ``table_fits``)."""
        allowed = self.items[column]
        for value in values:
            if value is not None and json_kind(value) not in allowed:
                return [
                    f"wrong type: field {column!r} holds {_a(json_kind(value))} ({_show(value)}); "
                    f"the schema expects an array of {_plural(allowed)}"
                ]
        return []

    def learn_from_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Fix the kind of each learned column not yet fixed by the block's majority (a tie: integer),
        so one odd event decides nothing."""
        todo = [c for c in self.learned if c not in self.pinned]
        if not todo:
            return
        counts: dict[str, Counter[str]] = {c: Counter() for c in todo}
        for event in events:
            for column in todo:
                value = event.get(column)
                if value is not None and json_kind(value) in HASHABLE:
                    counts[column][json_kind(value)] += 1
        for column, seen in counts.items():
            if seen:
                self.pinned[column] = max(sorted(seen), key=lambda k: (seen[k], k == "integer"))

    def table_fits(self, table: pa.Table) -> bool:
        """Whether every column the block was read into holds only values the rules allow (Arrow's
        JSON reader gives a column one type, or fails, so its type speaks for every value)."""
        for column in self.allowed:
            if column not in table.column_names:
                continue
            typ = table.schema.field(column).type
            kind = arrow_kind(typ)
            if kind is not None and kind not in self.expected(column):
                return False
            if column in self.items and kind is not None:
                item = arrow_kind(typ.value_type)
                if item is not None and item not in self.items[column]:
                    return False
        return True

    def learn_from_table(self, table: pa.Table) -> None:
        """Fix the kinds of learned columns from a block that read cleanly and fits."""
        for column in self.learned:
            if column in self.pinned or column not in table.column_names:
                continue
            kind = arrow_kind(table.schema.field(column).type)
            if kind is not None:
                self.pinned[column] = kind
