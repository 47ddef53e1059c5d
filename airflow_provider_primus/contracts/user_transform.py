"""A python transform step: the user's own function over a whole record batch (``type: python``).

Its own module so the schema's per-column steps stay as they were. A function is named like a python
model's factory (``package.module:function``, the same rule) and may read raw columns the schema does
not declare (``inputs``) and create declared ones the data does not hold (``outputs``): without the
two, readers could only hand it the declared columns and it could only rewrite them in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from airflow_provider_primus.contracts.base import ENTRYPOINT_FORM, ColumnName, NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.errors import Loc, raise_issues, suggest

__all__ = ["PYTHON_STEP", "PythonTransform", "python_step_issues"]

PYTHON_STEP = "python"
# What a per-column step holds: given beside ``type: python`` they would be silently meaningless.
_COLUMN_STEP_FIELDS = ("column", "hash_bucket", "fill", "cast")


class PythonTransform(StrictModel):
    """``function(batch, **options) -> batch``, run on the batch as read, before the per-column steps."""

    type: Literal["python"]
    function: str
    inputs: list[ColumnName] = Field(default_factory=list)
    outputs: list[ColumnName] = Field(default_factory=list)
    options: dict[NonEmptyStr, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _not_a_column_step(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        mixed = [k for k in _COLUMN_STEP_FIELDS if k in data]
        if mixed:
            raise_issues(
                [
                    (
                        (key,),
                        f"a python step is given the whole batch and takes no {key!r}; put "
                        f"per-column steps in their own list entries (they run after python steps)",
                    )
                    for key in mixed
                ]
            )
        return data

    @field_validator("function", mode="after")
    @classmethod
    def _function_form(cls, value: str) -> str:
        if not ENTRYPOINT_FORM.match(value):
            raise ValueError(f"must look like 'package.module:function' (got {value!r})")
        return value


def python_step_issues(step: PythonTransform, index: int, declared: Sequence[str]) -> list[tuple[Loc, str]]:
    """What is wrong with a python step's columns against the schema it belongs to (``transforms[i]``)."""
    issues: list[tuple[Loc, str]] = []
    for j, name in enumerate(step.outputs):
        if name not in declared:
            hint = suggest(name, declared)
            issues.append(
                (
                    ("transforms", index, "outputs", j),
                    f"unknown column {name!r}; outputs name columns declared in sparse, multi_hot, dense, "
                    "label or event_time that the function creates"
                    + (f"; did you mean {hint!r}?" if hint else ""),
                )
            )
    for j, name in enumerate(step.inputs):
        if name in step.outputs:
            issues.append(
                (
                    ("transforms", index, "inputs", j),
                    f"{name!r} is also in outputs: a column the function creates is not read from the data",
                )
            )
    return issues
