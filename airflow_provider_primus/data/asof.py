"""The as-of join (``type: as_of_join``): each row gets the feature values of the latest feature row
for its key valid at or before its event time, never after.

The feature table is read whole (its key, time and feature columns) by the process that joins, and
indexed once: feature rows sorted by (key, time), each key a code and each distinct time a rank, so
that one integer per row, ``code * (times + 1) + rank``, is sorted too. A batch's rows are then found
with one ``searchsorted`` over that array: O(batch · log table) with NumPy kernels, no Python loop
per row. A row whose key has no feature row at or before its time gets nulls (the schema's ``fill``
steps can give them a value). The table is loaded again every ``refresh_s``: a stream's rows then
get the values as of the last load, and a long-running data executor sees features written since.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_primus.contracts.joins import AsOfJoin, FeatureTable
from airflow_provider_primus.contracts.schema import EventTime
from airflow_provider_primus.data.errors import TableError
from airflow_provider_primus.data.sources.files import open_filesystem

__all__ = ["AsOfJoinStep", "FeatureIndex", "load_feature_table"]

_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
COMPOSITE_LIMIT = 2**62  # keys times span below it: times as offsets, one search per batch


def to_micros(values: pa.Array, unit: str | None, what: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Timestamps (any unit, any zone) or integers counting ``unit`` since the epoch, as int64 micros;
    a null time is the far past for a feature (valid from always) and never matches for a row."""
    typ = values.type
    if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
        micros = pc.cast(pc.cast(values, pa.timestamp("us", tz=getattr(typ, "tz", None))), pa.int64())
    elif pa.types.is_integer(typ):
        unit = unit or "ms"
        ints = pc.cast(values, pa.int64())
        micros = pc.divide(ints, 1000) if unit == "ns" else pc.multiply(ints, _MICROS[unit])
    else:
        raise TableError(f"{what} is {typ}: an as-of join needs a timestamp or an integer time")
    return np.asarray(micros.fill_null(np.iinfo(np.int64).min).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass
class FeatureIndex:
    """The feature table, sorted by (key, time), and the sorted composite of both.

    A row's time enters the composite as its offset from the table's first time (clipped to the
    table's span), so one search finds the latest feature row at or before it. When keys times span
    would overflow 62 bits (a million keys over years of microseconds), times are replaced by their
    rank among the table's distinct times, which costs a second search per batch.
    """

    keys: pa.Array  # the distinct keys; a key's code is its position here
    composite: np.ndarray[Any, np.dtype[np.int64]]
    codes: np.ndarray[Any, np.dtype[np.int64]]  # per sorted feature row
    values: pa.Table  # the feature columns, in sorted order
    origin: int  # the table's first time, micros
    width: int  # composite = code * width + position of the time (1.. width - 1)
    times: np.ndarray[Any, np.dtype[np.int64]] | None = None  # distinct times, when ranked

    @classmethod
    def build(
        cls, table: pa.Table, key: str, time_column: str, unit: str | None, columns: list[str]
    ) -> FeatureIndex:
        table = table.filter(pc.is_valid(table.column(key)))
        keys = pc.unique(table.column(key).combine_chunks())
        found = pc.index_in(table.column(key), value_set=keys)
        codes = np.asarray(found.to_numpy(zero_copy_only=False), np.int64)
        micros = to_micros(table.column(time_column).combine_chunks(), unit, f"feature time {time_column!r}")
        order = np.lexsort((micros, codes))
        codes, micros = codes[order], micros[order]
        values = table.select(columns).take(pa.array(order))
        origin = int(micros.min()) if len(micros) else 0
        span = int(micros.max()) - origin if len(micros) else 0
        if (len(keys) + 1) * (span + 2) < COMPOSITE_LIMIT:
            width = span + 2
            return cls(keys, codes * width + (micros - origin + 1), codes, values, origin, width)
        ordered = np.sort(micros)
        times = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
        ranks = np.searchsorted(times, micros, side="left").astype(np.int64) + 1
        width = len(times) + 1
        return cls(keys, codes * width + ranks, codes, values, origin, width, times)

    def lookup(
        self,
        keys: pa.Array,
        micros: np.ndarray[Any, np.dtype[np.int64]],
        known: np.ndarray[Any, np.dtype[np.bool_]],
    ) -> pa.Table:
        """Per row, the feature values as of its time (nulls where none is valid yet, or where the
        row's time is not ``known``)."""
        found = pc.index_in(keys, value_set=self.keys)
        valid = np.asarray(found.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        codes = np.asarray(found.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        if self.times is None:  # offsets: before the first time is 0, after the last the last
            position = np.clip(micros - self.origin + 1, 0, self.width - 1)
        else:
            position = _sorted_search(self.times, micros)
        pos = _sorted_search(self.composite, codes * self.width + position) - 1
        ok = valid & known & (pos >= 0) & (position > 0)
        if len(self.codes):
            ok &= self.codes[np.clip(pos, 0, None)] == codes
        indices = pa.array(np.where(ok, pos, 0), mask=~ok)
        return self.values.take(indices)


def _sorted_search(haystack: np.ndarray[Any, Any], needles: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``searchsorted(side="right")`` with the needles sorted first: a sorted query walks the haystack
    in order (cache-friendly), several times faster than random probes into a large table."""
    order = np.argsort(needles, kind="stable")
    out = np.empty(len(needles), dtype=np.int64)
    out[order] = np.searchsorted(haystack, needles[order], side="right")
    return out


def load_feature_table(table: FeatureTable, columns: list[str]) -> pa.Table:
    """The feature table's ``columns``, read whole (files, Iceberg or Delta)."""
    try:
        if table.type == "files":
            import pyarrow.dataset as ds

            assert table.uri is not None
            fs, root = open_filesystem(table.uri, table.storage, owner=table.name)
            return ds.dataset(root, format="parquet", filesystem=fs).to_table(columns=columns)
        if table.type == "delta":
            from deltalake import DeltaTable

            from airflow_provider_primus.data.sources.delta import storage_options

            assert table.uri is not None
            return pa.table(
                DeltaTable(table.uri, storage_options=storage_options(table, None)).to_pyarrow_table(
                    columns=columns
                )
            )
        from airflow_provider_primus.data.sources.iceberg import load_table

        return load_table(table).scan(selected_fields=tuple(columns)).to_arrow()
    except TableError:
        raise
    except Exception as exc:  # a missing file or column, an unreachable catalog: named
        raise TableError(
            f"{table.name}: cannot be read for an as-of join: {type(exc).__name__}: {exc}"
        ) from None


class AsOfJoinStep:
    """One join step of a schema: called per batch like a python step, adding the joined columns."""

    def __init__(self, step: AsOfJoin, event_time: EventTime | None) -> None:
        if event_time is None:  # the contract refuses it; a transformer built around it must too
            raise ValueError("an as_of_join needs the schema's event_time")
        self.step = step
        self.name = f"as_of_join({step.table.name})"
        self.event_time = event_time
        self._index: FeatureIndex | None = None
        self._loaded = 0.0
        self._lock = threading.Lock()

    def index(self) -> FeatureIndex:
        with self._lock:
            stale = self.step.refresh_s is not None and time.monotonic() - self._loaded > self.step.refresh_s
            if self._index is None or stale:
                s = self.step
                table = load_feature_table(s.table, list(dict.fromkeys([s.feature_key, s.time, *s.columns])))
                self._index = FeatureIndex.build(table, s.feature_key, s.time, s.time_unit, s.columns)
                self._loaded = time.monotonic()
            return self._index

    def __call__(self, batch: pa.RecordBatch, path: str) -> pa.RecordBatch:
        column = self.event_time.column
        micros = to_micros(
            batch.column(column), self.event_time.integer_unit, f"{path}: event time {column!r}"
        )
        known = micros != np.iinfo(np.int64).min  # a row without a time is valid as of nothing
        joined = self.index().lookup(batch.column(self.step.key), micros, known)
        for name in self.step.columns:
            batch = batch.append_column(name, joined.column(name).combine_chunks())
        return batch
