"""A source's schema: its features, its label (a column or a threshold rule), its event time (a
column and, for integer values, their unit) and its transforms.

Separate from where the rows come from (``sources.py``) because batch and stream readers share it:
both read and transform the same features by this one declaration.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from airflow_provider_primus.contracts.base import ColumnName, StrictModel
from airflow_provider_primus.contracts.errors import Loc, raise_issues, suggest
from airflow_provider_primus.contracts.joins import JOIN_STEP, AsOfJoin, is_join_step, join_step_issues
from airflow_provider_primus.contracts.user_transform import PYTHON_STEP, PythonTransform, python_step_issues

_RULE = re.compile(
    r"\s*(?P<column>[^\s<>=!]+)\s*(?P<op>>=|<=|==|!=|>|<)\s*"
    r"(?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*"
)
RULE_OPS = (">=", ">", "<=", "<", "==", "!=")

RuleOp = Literal[">=", ">", "<=", "<", "==", "!="]


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


EventTimeUnit = Literal["s", "ms", "us", "ns"]
EVENT_TIME_UNITS: tuple[EventTimeUnit, ...] = ("s", "ms", "us", "ns")
# Integers without a declared unit are epoch milliseconds: what the project read them as before units
# could be declared, so documents written then keep their meaning.
DEFAULT_EVENT_TIME_UNIT: EventTimeUnit = "ms"


def _event_time_schema(schema: dict[str, Any]) -> None:
    """Describe both forms an author may write: the column alone, or the column with its unit."""
    mapping = {
        "type": "object",
        "properties": {
            "column": {"type": "string", "minLength": 1, "description": "the event-time column"},
            "unit": {
                "type": "string",
                "enum": list(EVENT_TIME_UNITS),
                "description": "what an integer value counts since the epoch (default ms)",
            },
        },
        "required": ["column"],
        "additionalProperties": False,
    }
    schema.clear()
    schema["anyOf"] = [{"type": "string", "minLength": 1}, mapping]


class EventTime(StrictModel):
    """The event-time column, and what its integer values count since the epoch.

    The unit is part of the contract because an integer cannot say it: epoch seconds read as
    milliseconds put 1997 in January 1970 and shift every watermark and freshness figure 1000-fold.
    It applies to integer values only; timestamp-typed columns and ISO 8601 strings carry their own.
    ``event_time: ts`` stays valid and means ``{column: ts}`` (integers as milliseconds).
    """

    model_config = ConfigDict(json_schema_extra=_event_time_schema)

    column: ColumnName
    unit: EventTimeUnit | None = None

    @model_validator(mode="before")
    @classmethod
    def _plain_column(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"column": data}
        if not isinstance(data, Mapping):
            raise_issues(
                [((), f"must be a column name or {{column: <name>, unit: s|ms|us|ns}} (got {data!r})")]
            )
        return data

    @property
    def integer_unit(self) -> EventTimeUnit:
        """The unit integer values are read in: the declared one, else milliseconds."""
        return self.unit or DEFAULT_EVENT_TIME_UNIT

    @model_serializer(mode="plain")
    def _as_written(self) -> str | dict[str, Any]:
        # The short form when no unit is declared, so a dumped spec reads (and validates) as written.
        return self.column if self.unit is None else {"column": self.column, "unit": self.unit}


_TRANSFORM_KINDS = ("hash_bucket", "fill", "cast")


class Transform(StrictModel):
    """One step applied, in list order, by both the batch and the stream reader of a source."""

    union_tag: ClassVar[str] = "column_step"  # how contract errors tell it from a python step

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


MultiHotPooling = Literal["sum", "mean"]


class MultiHot(StrictModel):
    """A column whose value is a list of IDs (a user's recent items), pooled into one vector.

    Declared apart from ``sparse`` because its data is a list: readers keep it one, the trainer
    carries it as ``ids``/``offsets`` and the model pools it with ``nn.EmbeddingBag``. ``max_length``
    caps what a row keeps (its first IDs), which bounds the work one heavy user adds to a step.
    """

    column: ColumnName
    pooling: MultiHotPooling = "sum"
    max_length: Annotated[int, Strict(), Field(ge=1)] | None = None


def _step_kind(value: Any) -> str:
    """A python step says ``type: python`` (or names a ``function``), a join ``type: as_of_join``;
    every other step is a column's."""
    if is_join_step(value):
        return JOIN_STEP
    if isinstance(value, Mapping):
        return PYTHON_STEP if "type" in value or "function" in value else Transform.union_tag
    return PYTHON_STEP if isinstance(value, PythonTransform) else Transform.union_tag


Step = Annotated[
    Annotated[Transform, Tag(Transform.union_tag)]
    | Annotated[PythonTransform, Tag(PYTHON_STEP)]
    | Annotated[AsOfJoin, Tag(JOIN_STEP)],
    Discriminator(_step_kind),
]


class SourceSchema(StrictModel):
    """Declared once per source so batch and stream read and transform the same features."""

    sparse: list[ColumnName] = Field(default_factory=list)
    multi_hot: list[MultiHot] = Field(default_factory=list)
    dense: list[ColumnName] = Field(default_factory=list)
    label: Label
    event_time: EventTime | None = None
    # Python steps (``type: python``) run first, in list order, on the batch as read; the per-column
    # steps then run on their output (data/user_transforms.py).
    transforms: list[Step] = Field(default_factory=list)
    # A row whose label is null (or NaN, or null input to a rule) has no target: training it as 0
    # would invent a negative. ``drop`` leaves it out and counts it per task; ``fail`` fails the
    # task like a read error. A ``fill`` on the label column declares a value and takes precedence.
    missing_label: Literal["drop", "fail"] = "drop"

    @property
    def event_time_column(self) -> str | None:
        return self.event_time.column if self.event_time is not None else None

    @property
    def multi_hot_columns(self) -> list[str]:
        return [m.column for m in self.multi_hot]

    def columns(self) -> list[str]:
        """The declared columns: features, then label, then event time, each once."""
        wanted = [*self.sparse, *self.multi_hot_columns, *self.dense, self.label.column]
        if self.event_time is not None:
            wanted.append(self.event_time.column)
        return list(dict.fromkeys(wanted))

    @property
    def column_steps(self) -> list[Transform]:
        """The per-column steps (``hash_bucket``, ``fill``, ``cast``), in list order."""
        return [t for t in self.transforms if isinstance(t, Transform)]

    @property
    def python_steps(self) -> list[PythonTransform]:
        """The user's functions (``type: python``), in list order."""
        return [t for t in self.transforms if isinstance(t, PythonTransform)]

    @property
    def joins(self) -> list[AsOfJoin]:
        """The as-of joins with feature tables, in list order."""
        return [t for t in self.transforms if isinstance(t, AsOfJoin)]

    @property
    def batch_steps(self) -> list[PythonTransform | AsOfJoin]:
        """The whole-batch steps (python functions, joins), in list order: they run first."""
        return [t for t in self.transforms if isinstance(t, PythonTransform | AsOfJoin)]

    def produced(self) -> set[str]:
        """Declared columns a python step or a join creates (its ``outputs``): not read from the data."""
        return {c for step in self.batch_steps for c in step.outputs}

    def raw_columns(self) -> list[str]:
        """The columns a reader must fetch: the declared ones no batch step creates, then the
        steps' extra ``inputs`` (a join's key), each once. Without batch steps, ``columns()``."""
        produced = self.produced()
        extra = [c for step in self.batch_steps for c in step.inputs]
        return list(dict.fromkeys([*(c for c in self.columns() if c not in produced), *extra]))

    @model_validator(mode="after")
    def _columns_consistent(self) -> SourceSchema:
        issues: list[tuple[Loc, str]] = []
        seen: dict[str, str] = {}
        groups: tuple[tuple[str, list[str], tuple[str, ...]], ...] = (
            ("sparse", self.sparse, ()),
            ("multi_hot", self.multi_hot_columns, ("column",)),
            ("dense", self.dense, ()),
        )
        for group, names, leaf in groups:
            for i, name in enumerate(names):
                if name in seen:
                    issues.append(
                        (
                            (group, i, *leaf),
                            f"column {name!r} is listed more than once (first at {seen[name]})",
                        )
                    )
                else:
                    seen[name] = f"{group}[{i}]"
        lists = set(self.multi_hot_columns)
        known = self.columns()
        for i, transform in enumerate(self.transforms):
            if isinstance(transform, PythonTransform):
                issues.extend(python_step_issues(transform, i, known))
            elif isinstance(transform, AsOfJoin):
                issues.extend(join_step_issues(transform, i, known, self.event_time_column))
            elif transform.column not in known:
                message = (
                    f"unknown column {transform.column!r}; a transform must name a column declared in "
                    f"sparse, multi_hot, dense, label or event_time"
                )
                hint = suggest(transform.column, known)
                issues.append(
                    (("transforms", i, "column"), message + (f"; did you mean {hint!r}?" if hint else ""))
                )
            elif transform.hash_bucket is not None and transform.column not in (*self.sparse, *lists):
                issues.append(
                    (
                        ("transforms", i, "hash_bucket"),
                        f"only sparse and multi_hot columns can be hash-bucketed; {transform.column!r} "
                        f"is in neither",
                    )
                )
            elif transform.column in lists and transform.fill is not None:
                issues.append(
                    (
                        ("transforms", i, "fill"),
                        f"{transform.column!r} is a multi_hot (list) column: a null list already reads as "
                        f"an empty one and null IDs in a list are dropped, so there is nothing to fill",
                    )
                )
            elif transform.column in lists and transform.cast not in (None, "int64", "string"):
                issues.append(
                    (
                        ("transforms", i, "cast"),
                        f"{transform.column!r} is a multi_hot (list) column of IDs: cast applies to each "
                        f"ID and may only be int64 or string (got {transform.cast!r})",
                    )
                )
        if issues:
            raise_issues(issues)
        return self
