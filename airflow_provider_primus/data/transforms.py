"""A source's declared schema applied to Arrow record batches: the one place features are computed.

Batch executors and the stream reader both call ``BatchTransformer`` (stream events are turned into
record batches first), so the features a model trains on cannot drift between the two paths. The
class does no I/O and every step is a pyarrow.compute or numpy kernel over whole columns: a Python loop
per row would cap an executor at a few hundred thousand rows per second.

Conventions, fixed here so batch and stream agree:

- Output columns, in order: each sparse column (int64), each multi-hot column (a list of int32 or
  int64 IDs, see below), each dense column (float32), ``label``
  (float32), ``event_time`` (timestamp[us, UTC], only when the schema declares one), then the
  ``passthrough`` columns unchanged.
- Python steps (``type: python``, ``user_transforms.py``) run first, in list order, on the batch as
  read; their output must hold every declared column (checked on the first batch and whenever its
  schema changes) and the input's rows. Passthrough columns are taken from the batch as read.
- Transforms run per column in the order they are listed; every use of a column (feature, label rule,
  event time) sees the transformed values.
- ``fill`` replaces nulls, and NaN too for floating columns; its value must fit the column's type
  exactly (filling 2.5 into an integer column is an error, not a silent truncation).
- ``hash_bucket: N`` maps integer IDs with the splitmix64 finalizer (wrapping uint64 arithmetic on the
  two's-complement value, so int32 5 and int64 5 land in the same bucket) and string/binary IDs with
  the first 8 bytes (little-endian) of BLAKE2b of their UTF-8 bytes, both modulo N. Both are
  independent of platform, process and Python's hash seed. The string ``"5"`` and the integer ``5``
  hash differently. Null IDs go to bucket 0 unless a ``fill`` ran first.
- A sparse column without ``hash_bucket`` is taken as final IDs: it must be integer or castable to
  int64 without loss (``"12"`` and ``12.0`` are; ``12.5`` is an error); nulls become 0.
- A multi-hot column must hold lists (Arrow list or large_list; a column of nulls reads as empty
  lists). A null list becomes an empty one and null IDs inside a list are dropped; then a list longer
  than ``max_length`` keeps its first ``max_length`` IDs; then the column's transforms (``cast`` to
  int64 or string, ``hash_bucket``) apply to every ID, exactly as they would to a single ID, so an ID
  lands in the same bucket in a list as alone. The work is on the flattened IDs, whole-column.
- Dense nulls stay null (NaN once they become tensors); declare a ``fill`` to choose a value.
- A missing label (null, or NaN in a label column; null or NaN input to a rule) is never trained:
  reading it as 0.0 would invent a negative. The schema's ``missing_label`` decides: ``drop`` (the
  default) leaves the row out of the output and reports its index (``transform``), ``fail`` raises
  ``MissingLabelError``. A ``fill`` on the label column is a declared value and applies first. (The
  stream dead-letters such a message before it gets here.)
- ``event_time`` accepts timestamp columns (naive ones are taken as UTC), integers in the schema's
  declared unit (``s``, ``ms``, ``us``, ``ns``; **milliseconds** when none is declared), and ISO 8601
  strings (with an offset, or naive and taken as UTC). Whether the times are plausible is not judged
  here (``event_time.py``): a row is not wrong for being old, and the trainer counts such rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_primus.contracts.joins import AsOfJoin
from airflow_provider_primus.contracts.schema import SourceSchema, Transform
from airflow_provider_primus.data.asof import AsOfJoinStep
from airflow_provider_primus.data.event_time import UNIT_NAMES, fitting_units
from airflow_provider_primus.data.user_transforms import TransformOutputError, UserStep, steps_for
from airflow_provider_primus.errors import TerminalError

__all__ = [
    "EVENT_TIME",
    "LABEL",
    "BatchTransformer",
    "MissingLabelError",
    "SchemaMismatchError",
    "Transformed",
    "hash_ids",
]

LABEL = "label"
EVENT_TIME = "event_time"
EVENT_TIME_TYPE = pa.timestamp("us", tz="UTC")

_CASTS: dict[str, pa.DataType] = {
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
}
_RULES: dict[str, Callable[..., Any]] = {
    ">=": pc.greater_equal,
    ">": pc.greater,
    "<=": pc.less_equal,
    "<": pc.less,
    "==": pc.equal,
    "!=": pc.not_equal,
}
# splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mix, so distinct IDs only collide in the
# final modulo, and nearby IDs (user 1, 2, 3) spread over all buckets.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_INT32_BUCKETS = 2**31 - 1


class SchemaMismatchError(TerminalError):
    """The data does not fit the declared schema: a column is absent or of a type that cannot be used.
    Terminal where it ends an executor: the same data fails the same way however often it is read.

    ``path`` is the file (``"<stream>"`` for stream events), so an operator can find the bad input.
    """

    def __init__(self, path: str, column: str, detail: str) -> None:
        super().__init__(f"{path}: column {column!r}: {detail}")
        self.path = path
        self.column = column
        self.detail = detail


class MissingLabelError(SchemaMismatchError):
    """Rows without a label under ``missing_label: fail``: the task fails like any unreadable input."""


@dataclass(frozen=True)
class Transformed:
    """The transformed rows and the input rows left out for having no label (``missing_label: drop``).

    ``unlabelled`` holds indices into the input batch, ascending; the output's rows are the input's
    others, in order. Callers that number rows (the data executors) need them to keep their count.
    """

    batch: pa.RecordBatch
    unlabelled: np.ndarray[Any, np.dtype[np.int64]]


def _splitmix64(values: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    z = values.astype(np.uint64)  # a copy: the in-place steps below must not touch Arrow's buffers
    tmp = np.empty_like(z)  # one scratch buffer instead of a temporary per shift
    z += _GOLDEN
    for shift, multiplier in ((30, _MIX1), (27, _MIX2)):
        np.right_shift(z, np.uint64(shift), out=tmp)
        z ^= tmp
        z *= multiplier
    np.right_shift(z, np.uint64(31), out=tmp)
    z ^= tmp
    return z


def _hash_bytes(values: pa.Array) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """BLAKE2b of each value: only ever given a dictionary's distinct values, never one per row."""
    raw = pc.cast(values, pa.binary()).to_pylist()
    digests = b"".join(hashlib.blake2b(v or b"", digest_size=8).digest() for v in raw)
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def _is_bytes(typ: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
        or pa.types.is_fixed_size_binary(typ)
    )


def id_type(buckets: int) -> pa.DataType:
    """Bucket IDs as int32 when they fit: 4 bytes a value instead of 8 in every batch a data executor
    serializes, sends and a loader receives; the tensors widen them to int64 on the copy they make
    anyway."""
    return pa.int32() if buckets <= _INT32_BUCKETS else pa.int64()


def _hash_plain(values: pa.Array, buckets: int) -> np.ndarray[Any, Any]:
    """Buckets of non-dictionary values; nulls go to bucket 0."""
    dtype = id_type(buckets).to_pandas_dtype()
    typ = values.type
    if pa.types.is_null(typ):
        return np.zeros(len(values), dtype=dtype)
    if _is_bytes(typ):
        mixed = _hash_bytes(values)
    else:
        ints = values if pa.types.is_int64(typ) or pa.types.is_uint64(typ) else pc.cast(values, pa.int64())
        mixed = _splitmix64((pc.fill_null(ints, 0) if ints.null_count else ints).to_numpy())
    # Every bucket is below 2**63 (and below 2**31 for int32): the narrowing write keeps the number.
    out = np.empty(len(mixed), dtype=dtype)
    np.remainder(mixed, np.uint64(buckets), out=out, casting="unsafe")
    if values.null_count:
        out[~values.is_valid().to_numpy(zero_copy_only=False)] = 0
    return out


def hash_ids(values: pa.Array, buckets: int) -> pa.Array:
    """Bucket IDs in [0, buckets) from integer, boolean, string, binary or dictionary input; int32 when
    ``buckets`` fits (``id_type``), else int64."""
    if not _hashable(values.type):
        raise TypeError(f"hash_bucket needs integer or string values, found {values.type}")
    if not (pa.types.is_dictionary(values.type) or _is_bytes(values.type)):
        return pa.array(_hash_plain(values, buckets))
    # Hash each distinct value once, then gather by index: the Python-level work scales with the
    # number of distinct IDs in the batch, not with its rows.
    encoded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
    per_value = _hash_plain(encoded.dictionary, buckets)
    if len(per_value) == 0:  # every value null
        return pa.array(np.zeros(len(values), dtype=per_value.dtype))
    indices = encoded.indices
    out = per_value[pc.fill_null(indices, 0).to_numpy()]
    if indices.null_count:
        out[~indices.is_valid().to_numpy(zero_copy_only=False)] = 0
    return pa.array(out)


def _hashable(typ: pa.DataType) -> bool:
    if pa.types.is_dictionary(typ):
        return _hashable(typ.value_type)
    return bool(
        pa.types.is_integer(typ) or pa.types.is_boolean(typ) or pa.types.is_null(typ) or _is_bytes(typ)
    )


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow has a cast kernel at all; whether each value converts is only known per batch."""
    try:
        pc.cast(pa.array([], type=source), target)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def _numeric(typ: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(typ)
        or pa.types.is_floating(typ)
        or pa.types.is_decimal(typ)
        or pa.types.is_boolean(typ)
        or pa.types.is_null(typ)
    )


def _fill_scalar(value: int | float | str, typ: pa.DataType) -> pa.Scalar:
    # Safe cast: 2.5 into an int64 column raises instead of quietly becoming 2.
    return pa.scalar(value).cast(typ) if not pa.types.is_null(typ) else pa.scalar(value)


class BatchTransformer:
    """A source's features, label and event time from raw record batches; see the module docstring."""

    def __init__(self, schema: SourceSchema, passthrough: Sequence[str] = ()) -> None:
        self.schema = schema
        self.passthrough = tuple(dict.fromkeys(passthrough))
        self._steps: dict[str, list[Transform]] = {}
        # Whole-batch steps in list order: the user's functions and the as-of joins (data/asof.py,
        # which reads its feature table when first called, the only I/O a transformer does).
        self._user: list[UserStep | AsOfJoinStep] = [
            AsOfJoinStep(s, schema.event_time) if isinstance(s, AsOfJoin) else steps_for([s])[0]
            for s in schema.batch_steps
        ]
        for transform in schema.column_steps:
            self._steps.setdefault(transform.column, []).append(transform)
        self._lists = {m.column: m for m in schema.multi_hot}
        names = [*schema.sparse, *self._lists, *schema.dense, LABEL]
        if schema.event_time is not None:
            names.append(EVENT_TIME)
        clashes = [n for n in names if names.count(n) > 1]
        clashes += [p for p in self.passthrough if p in names]
        if clashes:
            # Decided here, not per batch: the output would otherwise silently carry two meanings.
            raise ValueError(
                f"output column name(s) {sorted(set(clashes))} used twice; 'label' and 'event_time' are "
                f"reserved for the label and event time, and passthrough columns must not be features"
            )
        self.output_names: tuple[str, ...] = (*names, *self.passthrough)
        self._checked: pa.Schema | None = None
        self._checked_output: pa.Schema | None = None

    def input_columns(self) -> list[str]:
        """Columns a reader must fetch: features, label, event time (those no python step creates),
        python steps' inputs, then passthrough, each once."""
        return list(dict.fromkeys([*self.schema.raw_columns(), *self.passthrough]))

    # -- schema check -------------------------------------------------------------------------------

    def check_schema(self, schema: pa.Schema, path: str) -> None:
        """Fail before any row is read when a column is absent or its type can never be used.

        Value-level problems (a string column holding ``"abc"`` where a number is needed) can only be
        found per batch and raise the same error from ``__call__``. With python steps only the columns
        are checked here: the types that matter are those of the functions' output.
        """
        for column in self.input_columns():
            if schema.get_field_index(column) < 0:
                found = ", ".join(schema.names) or "no columns"
                raise SchemaMismatchError(path, column, f"is not in the data (found: {found})")
        if not self._user:
            self._check_types(schema, path)

    def _check_output(self, schema: pa.Schema, path: str) -> None:
        """The python steps' output holds every declared column, of a type the per-column steps and
        the features can use; if not, that is the function's doing and the error names it."""
        function = " then ".join(step.name for step in self._user)
        for column in self.schema.columns():
            if schema.get_field_index(column) < 0:
                found = ", ".join(schema.names) or "no columns"
                raise TransformOutputError(
                    function,
                    path,
                    f"declared column is not in the function's output (found: {found})",
                    column,
                )
        try:
            self._check_types(schema, path)
        except SchemaMismatchError as exc:
            raise TransformOutputError(
                function, path, f"in the function's output: {exc.detail}", exc.column
            ) from None

    def _check_types(self, schema: pa.Schema, path: str) -> None:
        final = {
            c: self._final_type(c, self._value_type(c, schema.field(c).type, path), path)
            for c in self.schema.columns()
        }
        for column in self._lists:
            if not _castable(final[column], pa.int64()):
                raise SchemaMismatchError(
                    path,
                    column,
                    f"multi_hot IDs must be integers or declare hash_bucket; found lists of {final[column]}",
                )
        for column in self.schema.sparse:
            if not _castable(final[column], pa.int64()):
                raise SchemaMismatchError(
                    path,
                    column,
                    f"sparse IDs must be integers or declare hash_bucket; found type {final[column]}",
                )
        for column in self.schema.dense:
            if not _castable(final[column], pa.float32()) or _temporal(final[column]):
                raise SchemaMismatchError(
                    path, column, f"dense values must be numeric; found type {final[column]}"
                )
        label = self.schema.label
        found = final[label.column]
        if label.op is not None and not _numeric(found):
            raise SchemaMismatchError(
                path, label.column, f"label rule {label.rule!r} needs a numeric column; found type {found}"
            )
        if label.op is None and (not _castable(found, pa.float32()) or _temporal(found)):
            raise SchemaMismatchError(path, label.column, f"label must be numeric (0/1); found type {found}")
        if self.schema.event_time is not None:
            column = self.schema.event_time.column
            found = final[column]
            if not (
                pa.types.is_timestamp(found)
                or pa.types.is_integer(found)
                or pa.types.is_string(found)
                or pa.types.is_large_string(found)
                or pa.types.is_null(found)
            ):
                raise SchemaMismatchError(
                    path,
                    column,
                    f"event time must be a timestamp, an integer count since the epoch (unit "
                    f"{self.schema.event_time.integer_unit}) or an ISO 8601 string; found type {found}",
                )

    def _value_type(self, column: str, typ: pa.DataType, path: str) -> pa.DataType:
        """The type the column's transforms see: a multi-hot column's ID type (they apply to each
        ID), any other column's own type."""
        if column not in self._lists:
            return typ
        if pa.types.is_null(typ):
            return typ
        if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)):
            raise SchemaMismatchError(
                path, column, f"a multi_hot column must hold lists of IDs; found type {typ}"
            )
        return typ.value_type

    def _final_type(self, column: str, typ: pa.DataType, path: str) -> pa.DataType:
        """The column's type after its transforms, checking each step can apply to what it gets."""
        for step in self._steps.get(column, ()):
            if step.fill is not None:
                try:
                    filled = _fill_scalar(step.fill, typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise SchemaMismatchError(
                        path, column, f"fill value {step.fill!r} does not fit type {typ}: {exc}"
                    ) from None
                typ = filled.type if pa.types.is_null(typ) else typ
            elif step.cast is not None:
                target = _CASTS[step.cast]
                if not _castable(typ, target):
                    raise SchemaMismatchError(path, column, f"cannot cast type {typ} to {step.cast}")
                typ = target
            elif step.hash_bucket is not None:
                if not _hashable(typ):
                    raise SchemaMismatchError(
                        path, column, f"hash_bucket needs integer or string values; found type {typ}"
                    )
                typ = id_type(step.hash_bucket)
        return typ

    # -- transform ------------------------------------------------------------------------------------

    def __call__(self, batch: pa.RecordBatch, path: str = "<stream>") -> pa.RecordBatch:
        """The transformed batch, without rows that have no label; ``path`` only names the input in
        errors. Use ``transform`` to learn which rows were left out."""
        return self.transform(batch, path).batch

    def transform(self, batch: pa.RecordBatch, path: str = "<stream>") -> Transformed:
        """The transformed batch and the input rows it leaves out for having no label."""
        out = self._transform_all(batch, path)
        label = out.column(LABEL)
        if not label.null_count:
            return Transformed(out, np.empty(0, dtype=np.int64))
        missing = label.is_null()
        unlabelled = np.flatnonzero(missing.to_numpy(zero_copy_only=False)).astype(np.int64)
        if self.schema.missing_label == "fail":
            first = int(unlabelled[0])
            raise MissingLabelError(
                path,
                self.schema.label.column,
                f"{len(unlabelled)} of {len(label)} rows have no label (null or NaN), the first at row "
                f"{first} of this batch; missing_label is 'fail' (use 'drop' to leave them out and "
                f"count them, or declare a fill on the label column)",
            )
        return Transformed(out.filter(pc.invert(missing)), unlabelled)

    def _transform_all(self, batch: pa.RecordBatch, path: str) -> pa.RecordBatch:
        """Every input row transformed; a row without a label has a null label here."""
        if self._checked is None or not batch.schema.equals(self._checked):
            self.check_schema(batch.schema, path)
            self._checked = batch.schema
        raw = batch
        if self._user:
            for step in self._user:
                batch = step(batch, path)
            if self._checked_output is None or not batch.schema.equals(self._checked_output):
                self._check_output(batch.schema, path)
                self._checked_output = batch.schema
        cache: dict[str, pa.Array] = {}

        def column(name: str) -> pa.Array:
            if name not in cache:
                cache[name] = self._apply_steps(name, batch.column(name), path)
            return cache[name]

        arrays: list[pa.Array] = []
        for name in self.schema.sparse:
            arrays.append(self._sparse(name, column(name), path))
        for name, declared in self._lists.items():
            arrays.append(self._multi_hot(name, batch.column(name), declared.max_length, path))
        for name in self.schema.dense:
            arrays.append(_cast(column(name), pa.float32(), name, path))
        arrays.append(self._label(column(self.schema.label.column), path))
        event_time = self.schema.event_time
        if event_time is not None:
            arrays.append(
                _event_time(column(event_time.column), event_time.column, event_time.integer_unit, path)
            )
        arrays.extend(raw.column(name) for name in self.passthrough)
        return pa.RecordBatch.from_arrays(arrays, names=list(self.output_names))

    def apply_transforms(self, name: str, values: pa.Array, path: str = "<sample>") -> pa.Array:
        """One column through its declared steps alone: how a check of that column (a sample's event
        times) sees the values training would, without reading every other column."""
        return self._apply_steps(name, values, path)

    def _apply_steps(self, name: str, values: pa.Array, path: str) -> pa.Array:
        for step in self._steps.get(name, ()):
            if step.fill is not None:
                fill = _fill_scalar(step.fill, values.type)
                if pa.types.is_null(values.type):
                    values = pa.repeat(fill, len(values))
                    continue
                values = pc.fill_null(values, fill)
                if pa.types.is_floating(values.type):
                    values = pc.if_else(pc.is_nan(values), fill, values)
            elif step.cast is not None:
                values = _cast(values, _CASTS[step.cast], name, path)
            elif step.hash_bucket is not None:
                values = hash_ids(values, step.hash_bucket)
        return values

    def _multi_hot(self, name: str, lists: pa.Array, max_length: int | None, path: str) -> pa.Array:
        """The column as lists of final IDs: nulls dropped, capped, then transformed ID by ID."""
        flat, lengths = _kept_ids(lists, max_length)
        ids = self._sparse(name, self._apply_steps(name, flat, path), path)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] <= _INT32_BUCKETS:
            return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), ids)
        return pa.LargeListArray.from_arrays(pa.array(offsets), ids)

    def _sparse(self, name: str, values: pa.Array, path: str) -> pa.Array:
        if pa.types.is_null(values.type):
            return pa.array(np.zeros(len(values), dtype=np.int64))
        # int32 IDs (hashed into few enough buckets) stay narrow; every other integer becomes int64.
        ids = values if pa.types.is_int32(values.type) else _cast(values, pa.int64(), name, path)
        return pc.fill_null(ids, 0) if ids.null_count else ids

    def _label(self, values: pa.Array, path: str) -> pa.Array:
        """float32 labels; null where the row has none (null or NaN value, null or NaN rule input)."""
        label = self.schema.label
        if pa.types.is_null(values.type):
            return pa.nulls(len(values), pa.float32())
        if label.op is not None:
            if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
                values = _cast(values, pa.float64(), label.column, path)  # bool, decimal: no kernel
            if pa.types.is_floating(values.type):
                # NaN compares false with everything: it would read as a confident negative.
                values = pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values)
            hit = _RULES[label.op](values, pa.scalar(label.value, pa.float64()))
            return pc.cast(hit, pa.float32())  # null stays null: no label
        out = _cast(values, pa.float32(), label.column, path)
        return pc.if_else(pc.is_nan(out), pa.scalar(None, pa.float32()), out)


def _kept_ids(lists: pa.Array, max_length: int | None) -> tuple[pa.Array, np.ndarray[Any, Any]]:
    """Every row's IDs one after another and each row's count, without null lists (read as empty),
    null IDs (dropped) or IDs past ``max_length`` (the first ones are kept): one mask over the
    flattened IDs, whatever the number of rows."""
    if pa.types.is_null(lists.type):
        return pa.array([], type=pa.int64()), np.zeros(len(lists), dtype=np.int64)
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    flat = pc.list_flatten(lists)  # null lists contribute nothing
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if not flat.null_count and (max_length is None or not len(lengths) or lengths.max() <= max_length):
        return flat, lengths
    keep = flat.is_valid().to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    if max_length is not None:
        # A kept ID's place in its row, counting only kept IDs: the first max_length of them stay.
        kept_before = np.cumsum(keep) - keep
        row_start = np.concatenate(([0], np.cumsum(np.bincount(rows, weights=keep, minlength=len(lengths)))))
        place = kept_before - row_start[rows].astype(np.int64)
        keep &= place < max_length
    return flat.filter(pa.array(keep)), np.bincount(rows[keep], minlength=len(lengths)).astype(np.int64)


def _temporal(typ: pa.DataType) -> bool:
    return bool(pa.types.is_temporal(typ))


def _cast(values: pa.Array, target: pa.DataType, name: str, path: str) -> pa.Array:
    if values.type == target:
        return values
    try:
        return pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(
            path, name, f"found type {values.type}; cannot cast to {target}: {exc}"
        ) from None


# Integer event times to microseconds: multiply by the first or divide by the second.
_TO_MICROS = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}


def _event_time(values: pa.Array, name: str, unit: str, path: str) -> pa.Array:
    typ = values.type
    try:
        if pa.types.is_timestamp(typ):
            # Converting units only; naive values are already UTC-based epoch counts in Arrow.
            return pc.cast(values, EVENT_TIME_TYPE, safe=typ.unit != "ns")
        if pa.types.is_integer(typ):
            return pc.cast(_integer_micros(values, name, unit, path), EVENT_TIME_TYPE)
        if pa.types.is_null(typ):
            return pa.nulls(len(values), EVENT_TIME_TYPE)
        try:
            return pc.cast(values, EVENT_TIME_TYPE)
        except pa.ArrowInvalid:
            return pc.cast(pc.cast(values, pa.timestamp("us")), EVENT_TIME_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(path, name, f"found type {typ}; not a usable event time: {exc}") from None


def _integer_micros(values: pa.Array, name: str, unit: str, path: str) -> pa.Array:
    """Integers counted in ``unit`` as int64 microseconds; an overflow names the unit that fits."""
    multiply, divide = _TO_MICROS[unit]
    ints = pc.cast(values, pa.int64())
    try:
        if multiply != 1:
            return pc.multiply_checked(ints, multiply)
        return pc.divide(ints, divide) if divide != 1 else ints
    except pa.ArrowInvalid:
        # Only a unit mix-up gets here (nanoseconds read as seconds or milliseconds): say so.
        low, high = pc.min_max(ints).values()
        fits = fitting_units(float(low.as_py()), float(high.as_py()))
        hint = f"; they fit epoch {UNIT_NAMES[fits[0]]}: declare unit {fits[0]}" if fits else ""
        raise SchemaMismatchError(
            path,
            name,
            f"integer event times {low.as_py()} .. {high.as_py()} overflow when read as epoch "
            f"{UNIT_NAMES[unit]} (unit {unit}){hint}",
        ) from None
