"""The user's own transform functions (``type: python`` steps) run on whole record batches.

A function is ``fn(batch: pyarrow.RecordBatch, **options) -> pyarrow.RecordBatch``. Data executors
(files) and the trainer's stream decoder (Kafka) both run it inside ``BatchTransformer``, before the
per-column steps, so a feature computed in Python is computed once, by the same code, for both.

What it may do, and why:

- Add, replace and drop columns: the declared columns must all be in its output (the ones it creates
  are listed in the step's ``outputs``, since they are not read from the data).
- Not add, drop or reorder rows: progress and exactly-once delivery count rows by their position in a
  file or by their Kafka offset, so an output row must be the input row at the same position. Rows to
  leave out are dropped by the schema (``missing_label: drop``) or upstream.
- Be called from several threads at once (a data executor transforms batches side by side): it must
  not keep state between calls that one batch's result depends on.

Two errors, because they mean different things. :class:`UserTransformError`: the function raised on
this data; the task is quarantined (files) or the messages it raises on are dead-lettered (stream),
as malformed input is, and the job goes on. :class:`TransformOutputError`: its output breaks the
contract above (a declared column missing or of an unusable type, rows added or lost); that is the
code, not the data, so no input escapes it and the stream stops with it (files: each task is
quarantined with it, every task fails the same way, and the job fails once too many are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_primus.contracts.user_transform import PythonTransform
from airflow_provider_primus.errors import TerminalError, user_frames
from airflow_provider_primus.imports import CallableImportError, import_callable

__all__ = [
    "TransformFunctionError",
    "TransformOutputError",
    "UserStep",
    "UserTransformError",
    "load_function",
    "steps_for",
]

UserFunction = Callable[..., Any]
_LIBRARY = (Path(pa.__file__).resolve().parent,)  # frames in it are not the user's


class TransformFunctionError(TerminalError):
    """A function that cannot be imported or is not callable: nothing will ever run it."""


class UserTransformError(TerminalError):
    """The user's function raised on a batch; ``path`` names the input (``<stream>`` for events)."""

    def __init__(self, function: str, path: str, reason: str) -> None:
        super().__init__(f"{path}: transform {function} raised {reason}")
        self.function = function
        self.path = path
        self.reason = reason


class TransformOutputError(TerminalError):
    """The function's output breaks the contract (see the module docstring), naming the column."""

    def __init__(self, function: str, path: str, detail: str, column: str | None = None) -> None:
        where = f": column {column!r}" if column is not None else ""
        super().__init__(f"{path}: transform {function}{where}: {detail}")
        self.function = function
        self.path = path
        self.column = column
        self.detail = detail


def load_function(name: str) -> UserFunction:
    """The callable ``package.module:function`` names, imported in this process."""
    try:
        function: UserFunction = import_callable(name)
    except CallableImportError as exc:
        raise TransformFunctionError(str(exc)) from exc.__cause__
    return function


class UserStep:
    """One python step: its function imported once, called per batch, its result held to the rows."""

    def __init__(self, step: PythonTransform, *, function: UserFunction | None = None) -> None:
        """``function``: the callable itself, in place of importing ``step.function``."""
        self.name = step.function
        self.options: Mapping[str, Any] = dict(step.options)
        if function is None:
            try:
                function = load_function(step.function)
            except TransformFunctionError as exc:
                raise TransformFunctionError(f"transform {step.function}: {exc}") from exc
        self._function = function

    def __call__(self, batch: pa.RecordBatch, path: str) -> pa.RecordBatch:
        try:
            out = self._function(batch, **self.options)
        except Exception as exc:
            raise UserTransformError(self.name, path, user_frames(exc, _LIBRARY)) from exc
        if isinstance(out, pa.Table):  # the same rows, in one batch
            out = _one_batch(out)
        if not isinstance(out, pa.RecordBatch):
            raise TransformOutputError(
                self.name, path, f"returned {type(out).__name__}, expected a pyarrow.RecordBatch"
            )
        if out.num_rows != batch.num_rows:
            raise TransformOutputError(
                self.name,
                path,
                f"returned {out.num_rows} rows for {batch.num_rows}: a transform keeps every row, in "
                f"order (rows are counted by position for exactly-once delivery); leave rows out with "
                f"the schema's missing_label: drop, or upstream",
            )
        return out


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def steps_for(steps: Sequence[PythonTransform]) -> list[UserStep]:
    """The schema's python steps, each function imported (a terminal error naming it if not)."""
    return [UserStep(step) for step in steps]
