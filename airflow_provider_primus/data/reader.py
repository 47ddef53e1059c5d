"""Reading a files task as Arrow record batches, by row number, so progress can be exact.

A task's rows are numbered 0..rows-1 in one fixed order: its slices in the task's order; inside a
slice its row groups in order (the whole file when the slice names none); rows in file order. The
dispatcher leases and acknowledges row ranges of that numbering, so a retried or split task resumes
at a row, never re-serving or skipping one. That is why this module trusts a slice's planned row count
to skip it without opening the file, and refuses a Parquet file whose row count no longer matches
the plan: a silently rewritten file would shift every row number after it.

Only the requested columns are decoded, and Parquet row groups before ``start_row`` are skipped by
their footer row counts, never read. CSV and JSON lines have no row index, so a file of them is read
whole; the planner keeps such files as whole-file slices.

A file changed since it was planned (an object's ETag; a file's size, modification time or Parquet
footer, ``data/identity.py``) raises ``FileChangedError`` before any of its rows is read.

Errors: bytes that cannot be decoded (corrupt, truncated, a page failing its checksum, text that does
not parse) raise ``CorruptFileError``; a requested column absent from a file raises
``SchemaMismatchError`` before any row of it is read. Failures of the filesystem itself (a missing
file, a refused connection) propagate as the ``OSError`` they are, because they may be transient and
say nothing about the file's content.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from airflow_provider_primus.data.errors import CorruptFileError, FileChangedError
from airflow_provider_primus.data.identity import check_unchanged
from airflow_provider_primus.data.model import ColumnRef, FileSlice, Task
from airflow_provider_primus.data.objectstore import ObjectStoreError, named_failure, object_version
from airflow_provider_primus.data.transforms import SchemaMismatchError

__all__ = ["FORMATS", "read_task", "task_row_count"]

FORMATS = ("parquet", "csv", "jsonl")

# Parquet is decoded in batches of at least this many rows, then cut (zero-copy) to ``batch_rows``:
# per-batch decoder overhead made 8,192-row reads ~30% slower on wide feature tables.
READ_ROWS = 65_536

# (path, batch) pairs; a slice reader's return value is the slice's total row count.
_Pieces = Generator[tuple[str, pa.RecordBatch], None, int]


def read_task(
    task: Task,
    *,
    fmt: str,
    columns: Sequence[str],
    batch_rows: int,
    start_row: int = 0,
    end_row: int | None = None,
    filesystem: pafs.FileSystem | None = None,
    decode_threads: bool = True,
    fields: Mapping[str, ColumnRef] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Rows [start_row, end_row) of the task as batches of exactly ``batch_rows`` rows (the last may be
    shorter), spanning slice boundaries. Columns come in the order given, each once.

    Arguments are checked now; files are opened as the iterator is consumed. ``filesystem`` None reads
    the task's paths from the local disk. ``decode_threads`` decodes a Parquet batch's columns on
    Arrow's thread pool: faster for a lone reader, but extra CPU (pool hand-offs) that a process whose
    other threads already keep its cores busy cannot spare. ``fields``: a table's columns by field
    id (Iceberg), so files written under an older schema are read by id, not name (below).
    """
    if task.kind != "files":
        raise ValueError(f"task {task.task_id} is a {task.kind!r} task; read_task reads files tasks")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1 (got {batch_rows})")
    if start_row < 0 or (end_row is not None and end_row < start_row):
        raise ValueError(f"bad row range [{start_row}, {end_row})")
    fs = filesystem if filesystem is not None else pafs.LocalFileSystem()
    wanted = list(dict.fromkeys(columns))
    return _rebatch(
        _task_pieces(
            task,
            fmt=fmt,
            columns=wanted,
            batch_rows=batch_rows,
            start_row=start_row,
            end_row=end_row,
            fs=fs,
            local=filesystem is None,
            decode_threads=decode_threads,
            fields=fields,
        ),
        batch_rows,
    )


def task_row_count(task: Task, fmt: str, filesystem: pafs.FileSystem | None = None) -> int:
    """The task's rows: from the plan when known (Parquet footers), else by reading (CSV, JSON lines)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if task.rows is not None:
        return task.rows
    fs = filesystem if filesystem is not None else pafs.LocalFileSystem()
    total = 0
    for piece in task.slices:
        if piece.rows is not None:
            total += piece.rows
            continue
        path = _local(piece.path) if filesystem is None else piece.path
        if fmt == "parquet":
            with fs.open_input_file(path) as handle:
                pf = _open_parquet(handle, path)
                total += sum(_row_group_rows(pf, piece, path))
        else:
            total += _read_text(fs, path, fmt, []).num_rows
    return total


# -- per task ---------------------------------------------------------------------------------------


def _local(path: str) -> str:
    return os.path.abspath(path)


def _task_pieces(
    task: Task,
    *,
    fmt: str,
    columns: list[str],
    batch_rows: int,
    start_row: int,
    end_row: int | None,
    fs: pafs.FileSystem,
    local: bool,
    decode_threads: bool,
    fields: Mapping[str, ColumnRef] | None = None,
) -> Iterator[tuple[str, pa.RecordBatch]]:
    pos = 0  # task row number of the current slice's first row
    for piece in task.slices:
        if end_row is not None and pos >= end_row:
            return
        if piece.rows is not None and pos + piece.rows <= start_row:
            pos += piece.rows  # wholly before the range: not even opened
            continue
        path = _local(piece.path) if local else piece.path
        lo = max(0, start_row - pos)
        hi = None if end_row is None else end_row - pos
        if fmt == "parquet":
            rows = yield from _parquet_slice(
                fs,
                path,
                piece,
                columns=columns,
                lo=lo,
                hi=hi,
                batch_rows=batch_rows,
                threads=decode_threads,
                source=task.source,
                fields=fields,
            )
        else:
            rows = yield from _text_slice(
                fs, path, piece, fmt=fmt, columns=columns, lo=lo, hi=hi, source=task.source
            )
        pos += rows


def _rebatch(pieces: Iterator[tuple[str, pa.RecordBatch]], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Cut and join pieces into batches of exactly ``batch_rows``; a piece that fits is not copied."""
    pending: list[tuple[str, pa.RecordBatch]] = []
    count = 0
    for path, piece in pieces:
        rest = piece.replace_schema_metadata(None)  # writers' metadata differs per file; rows do not
        while rest.num_rows:
            take = min(batch_rows - count, rest.num_rows)
            pending.append((path, rest.slice(0, take)))
            rest = rest.slice(take)
            count += take
            if count == batch_rows:
                yield _concat(pending)
                pending, count = [], 0
    if count:
        yield _concat(pending)


def _concat(pending: list[tuple[str, pa.RecordBatch]]) -> pa.RecordBatch:
    if len(pending) == 1:
        return pending[0][1]
    batches = [b for _, b in pending]
    first = batches[0].schema
    if any(not b.schema.equals(first) for b in batches[1:]):
        # Files of one task may differ in inferred types (CSV: all-integer here, a decimal point
        # there); widen to a common type, or name the file and column that cannot be reconciled.
        try:
            common = pa.unify_schemas([b.schema for b in batches], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            path, column = _first_conflict(pending)
            raise SchemaMismatchError(
                path, column, f"type differs from earlier files of the task: {exc}"
            ) from None
        try:
            batches = [b.cast(common) for b in batches]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            path, column = _first_conflict(pending)
            raise SchemaMismatchError(
                path, column, f"type differs from earlier files of the task: {exc}"
            ) from None
    return pa.concat_batches(batches)


def _first_conflict(pending: list[tuple[str, pa.RecordBatch]]) -> tuple[str, str]:
    first = pending[0][1].schema
    for path, batch in pending[1:]:
        for field in batch.schema:
            if first.field(field.name).type != field.type:
                return path, field.name
    return pending[-1][0], first.names[0]


# -- Parquet ----------------------------------------------------------------------------------------


def _open_parquet(handle: pa.NativeFile, path: str, *, remote: bool = True) -> pq.ParquetFile:
    try:
        # Verify page checksums where the writer stored them: otherwise a flipped bit decodes into
        # plausible but wrong feature values instead of failing. Pre-buffering coalesces a row
        # group's column chunks into few large reads: one round trip instead of one per column on
        # an object store; on a local disk it only adds a hop through Arrow's I/O threads.
        return pq.ParquetFile(handle, page_checksum_verification=True, pre_buffer=remote)
    except Exception as exc:  # ArrowInvalid / OSError for a bad magic, footer or schema
        raise CorruptFileError(path, str(exc)) from exc


def _row_group_rows(pf: pq.ParquetFile, piece: FileSlice, path: str) -> list[int]:
    meta = pf.metadata
    n = meta.num_row_groups
    first = piece.row_group_start if piece.row_group_start is not None else 0
    last = piece.row_group_end if piece.row_group_end is not None else n
    if not 0 <= first <= last <= n:
        raise CorruptFileError(path, f"the task reads row groups [{first}, {last}) but the file has {n}")
    return [meta.row_group(i).num_rows for i in range(first, last)]


def by_field_id(
    schema: pa.Schema, columns: list[str], fields: Mapping[str, ColumnRef], path: str
) -> dict[str, str | None]:
    """Each wanted column's name in this file, found by its Iceberg field id (``PARQUET:field_id``):
    a column renamed since the file was written is read under its old name; one added since is
    None (read as nulls) unless the table requires it, which is an error naming it."""
    in_file: dict[int, str] = {}
    for f in schema:
        raw = (f.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            in_file[int(raw)] = f.name
    out: dict[str, str | None] = {}
    for column in columns:
        ref = fields.get(column)
        if ref is None:
            raise SchemaMismatchError(path, column, "is not a column of the table")
        name = in_file.get(ref.field_id)
        if name is None and not in_file and schema.get_field_index(column) >= 0:
            name = column  # a file written without field ids (an imported one): by name
        if name is None and ref.required:
            raise SchemaMismatchError(
                path, column, f"is required by the table but not in this file (field id {ref.field_id})"
            )
        out[column] = name
    return out


def _as_table_columns(
    batch: pa.RecordBatch,
    columns: list[str],
    named: Mapping[str, str | None],
    fields: Mapping[str, ColumnRef],
) -> pa.RecordBatch:
    arrays = []
    for column in columns:
        name = named[column]
        if name is None:
            arrays.append(pa.nulls(batch.num_rows, fields[column].type))
            continue
        array = batch.column(name)
        wanted = fields[column].type
        if array.type != wanted:  # a promoted type (int → long, float → double), as Iceberg allows
            array = array.cast(wanted)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=columns)


def _require_columns(schema: pa.Schema, columns: list[str], path: str) -> None:
    for column in columns:
        if schema.get_field_index(column) < 0:
            found = ", ".join(schema.names) or "no columns"
            raise SchemaMismatchError(path, column, f"is not in the file (found: {found})")


def _open_planned(fs: pafs.FileSystem, path: str, piece: FileSlice, source: str) -> pa.NativeFile:
    """Open the slice's file and refuse one changed since the plan: its row numbers no longer mean
    the planned rows. On an object store the slice carries the ETag it was planned with (opening
    sends one HEAD; the reads after it are ranged GETs of the footer and the chunks needed); on a
    filesystem its size, modification time and, for local Parquet, footer checksum
    (``data/identity.py``: one stat after opening, and a re-read of the footer's bytes).
    """
    if not piece.version:
        handle = fs.open_input_file(path)
        try:
            check_unchanged(fs, path, piece, source, handle)
        except BaseException:
            handle.close()
            raise
        return handle
    try:
        handle = fs.open_input_file(path)
    except ObjectStoreError:
        raise
    except OSError as exc:  # deleted since the plan, refused, unreachable after retries
        raise named_failure(f"source {source!r}", "reading", path, exc) from exc
    found = object_version(handle)
    if found and found != piece.version:
        handle.close()
        raise FileChangedError(
            path,
            f"source {source!r}: the object changed after planning (rewritten after it was planned: "
            f"ETag {piece.version} planned, {found} now); re-plan the window",
        )
    return handle


def _parquet_slice(
    fs: pafs.FileSystem,
    path: str,
    piece: FileSlice,
    *,
    columns: list[str],
    lo: int,
    hi: int | None,
    batch_rows: int,
    threads: bool,
    source: str,
    fields: Mapping[str, ColumnRef] | None = None,
) -> _Pieces:
    with _open_planned(fs, path, piece, source) as handle:
        pf = _open_parquet(handle, path, remote=not isinstance(fs, pafs.LocalFileSystem))
        wanted = columns
        if fields is not None:
            named = by_field_id(pf.schema_arrow, columns, fields, path)
            wanted = [c for c in dict.fromkeys(named.values()) if c is not None]
        else:
            _require_columns(pf.schema_arrow, columns, path)
        sizes = _row_group_rows(pf, piece, path)
        total = sum(sizes)
        if piece.rows is not None and piece.rows != total:
            raise CorruptFileError(
                path, f"has {total} rows in the task's row groups but the plan counted {piece.rows}"
            )
        end = total if hi is None else min(hi, total)
        if lo >= end:
            return total
        first_group = piece.row_group_start or 0
        groups: list[int] = []
        group_start = 0  # slice row number of the first selected group's first row
        acc = 0
        for i, rows in enumerate(sizes):
            if acc + rows > lo and acc < end:
                if not groups:
                    group_start = acc
                groups.append(first_group + i)
            acc += rows
        skip, need = lo - group_start, end - lo
        batches = pf.iter_batches(
            batch_size=max(batch_rows, READ_ROWS), row_groups=groups, columns=wanted, use_threads=threads
        )
        while need > 0:
            try:
                batch = next(batches)
            except StopIteration:
                raise CorruptFileError(path, f"ended {need} rows short of its footer's row count") from None
            except Exception as exc:  # decoding failed mid-file: truncated page, bad checksum, codec
                raise CorruptFileError(path, f"decoding row groups {groups[0]}..{groups[-1]}: {exc}") from exc
            if skip:
                if batch.num_rows <= skip:
                    skip -= batch.num_rows
                    continue
                batch, skip = batch.slice(skip), 0
            if batch.num_rows > need:
                batch = batch.slice(0, need)
            need -= batch.num_rows
            if fields is not None:
                batch = _as_table_columns(batch, columns, named, fields)
            # Parquet may return the columns in file order; callers index by position.
            elif batch.schema.names != columns:
                batch = batch.select(columns)
            yield path, batch
        return total


# -- CSV and JSON lines -------------------------------------------------------------------------------


def _read_text(fs: pafs.FileSystem, path: str, fmt: str, columns: list[str]) -> pa.Table:
    """The whole file, only ``columns``; compression is detected from the extension (``.gz``)."""
    try:
        with fs.open_input_stream(path, compression="detect") as stream:
            if fmt == "csv":
                return pacsv.read_csv(stream, convert_options=pacsv.ConvertOptions(include_columns=columns))
            table = pajson.read_json(stream)
    except pa.ArrowKeyError:  # CSV: a name in include_columns is not in the header
        header = _csv_header(fs, path)
        missing = next(c for c in columns if c not in header)
        raise SchemaMismatchError(
            path, missing, f"is not in the file (found: {', '.join(header) or 'no columns'})"
        ) from None
    except (FileNotFoundError, PermissionError):
        raise
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OSError,
        UnicodeDecodeError,
    ) as exc:
        raise CorruptFileError(path, str(exc)) from exc
    _require_columns(table.schema, columns, path)
    return table.select(columns)


def _csv_header(fs: pafs.FileSystem, path: str) -> list[str]:
    try:
        with fs.open_input_stream(path, compression="detect") as stream:
            names: list[str] = pacsv.open_csv(stream).schema.names
            return names
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptFileError(path, str(exc)) from exc


def _text_slice(
    fs: pafs.FileSystem,
    path: str,
    piece: FileSlice,
    *,
    fmt: str,
    columns: list[str],
    lo: int,
    hi: int | None,
    source: str,
) -> _Pieces:
    if piece.version:  # a text file is read whole anyway; the HEAD only checks it is the planned one
        _open_planned(fs, path, piece, source).close()
    table = _read_text(fs, path, fmt, columns)
    # After the read, before any row is handed out: a rewrite before or during it shows here.
    check_unchanged(fs, path, piece, source)
    total: int = table.num_rows
    end = total if hi is None else min(hi, total)
    if lo < end:
        for batch in table.slice(lo, end - lo).to_batches():
            yield path, batch
    return total
