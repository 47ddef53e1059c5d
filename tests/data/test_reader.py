"""read_task on real Parquet, CSV and JSON-lines files: row numbering, ranges, batching, errors."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.errors import CorruptFileError
from airflow_provider_primus.data.model import FileSlice, Task
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task, task_row_count
from airflow_provider_primus.data.transforms import SchemaMismatchError
from tests.data.conftest import files_source, hour_dir, spec_doc, write

COLUMNS = ["row_id", "feature"]


def ids_table(first: int, rows: int) -> pa.Table:
    ids = list(range(first, first + rows))
    return pa.table(
        {
            "row_id": pa.array(ids, pa.int64()),
            "feature": pa.array([i * 0.5 for i in ids], pa.float64()),
            "other": pa.array([f"x{i}" for i in ids]),
        }
    )


def parquet(path: Path, first: int, rows: int, group: int, **kw: object) -> tuple[str, int]:
    """A Parquet file of row_ids [first, first+rows) in row groups of ``group`` rows."""
    pq.write_table(ids_table(first, rows), path, row_group_size=group, **kw)
    return str(path), path.stat().st_size


CHECKSUMMED: dict[str, object] = {"write_page_checksum": True, "compression": "none", "use_dictionary": False}


def flip_last_value(path: str, row_group: int, column: int) -> None:
    """Flip a bit of the last (plain, uncompressed) value of a column chunk: its page header stays valid."""
    chunk = pq.ParquetFile(path).metadata.row_group(row_group).column(column)
    last = chunk.data_page_offset + chunk.total_compressed_size - 1
    data = bytearray(Path(path).read_bytes())
    data[last] ^= 0x01
    Path(path).write_bytes(bytes(data))


def files_task(*slices: FileSlice) -> Task:
    rows = [s.rows for s in slices]
    return Task(
        task_id="t",
        source="s",
        kind="files",
        group="g",
        rows=None if None in rows else sum(r for r in rows if r is not None),
        slices=slices,
    )


def read_ids(task: Task, fmt: str = "parquet", **kw: object) -> tuple[list[int], list[int]]:
    """(row_ids in order, batch sizes)."""
    kw.setdefault("batch_rows", 7)
    ids: list[int] = []
    sizes: list[int] = []
    for b in read_task(task, fmt=fmt, columns=COLUMNS, **kw):  # type: ignore[arg-type]
        assert b.schema.names == COLUMNS
        ids.extend(b.column("row_id").to_pylist())
        sizes.append(b.num_rows)
    return ids, sizes


def exact_batches(sizes: list[int], batch_rows: int, total: int) -> bool:
    full, rest = divmod(total, batch_rows)
    return sizes == [batch_rows] * full + ([rest] if rest else [])


@pytest.fixture
def three_files(tmp_path: Path) -> tuple[Task, list[int]]:
    """Slices: row groups [2, 5) of A, all of B, row groups [0, 1) of C; the expected row_ids."""
    a, a_size = parquet(tmp_path / "a.parquet", 0, 100, 10)
    b, b_size = parquet(tmp_path / "b.parquet", 1000, 25, 10)
    c, c_size = parquet(tmp_path / "c.parquet", 2000, 40, 15)
    task = files_task(
        FileSlice(a, a_size, 2, 5, rows=30),
        FileSlice(b, b_size, rows=25),
        FileSlice(c, c_size, 0, 1, rows=15),
    )
    expected = [*range(20, 50), *range(1000, 1025), *range(2000, 2015)]
    return task, expected


def test_whole_file_slice_in_exact_batches(tmp_path: Path) -> None:
    path, size = parquet(tmp_path / "a.parquet", 0, 100, 30)
    ids, sizes = read_ids(files_task(FileSlice(path, size, rows=100)), batch_rows=8)
    assert ids == list(range(100))
    assert exact_batches(sizes, 8, 100)


def test_row_group_ranges_across_slices(three_files: tuple[Task, list[int]]) -> None:
    task, expected = three_files
    for batch_rows in (1, 7, 10, 70, 1000):
        ids, sizes = read_ids(task, batch_rows=batch_rows)
        assert ids == expected
        assert exact_batches(sizes, batch_rows, len(expected))
    assert task_row_count(task, "parquet") == 70


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, None), (3, 27), (5, 30), (29, 31), (30, 55), (12, 64), (55, 70), (69, None), (70, None), (40, 40)],
)
def test_start_and_end_rows_anywhere(
    three_files: tuple[Task, list[int]], start: int, end: int | None
) -> None:
    task, expected = three_files
    ids, sizes = read_ids(task, batch_rows=6, start_row=start, end_row=end)
    assert ids == expected[start:end]
    assert exact_batches(sizes, 6, len(expected[start:end]))


def test_ranges_partition_the_task_exactly_once(three_files: tuple[Task, list[int]]) -> None:
    task, expected = three_files
    cuts = [0, 4, 17, 30, 31, 52, 70]
    seen: list[int] = []
    for lo, hi in itertools.pairwise(cuts):
        seen += read_ids(task, batch_rows=5, start_row=lo, end_row=hi)[0]
    assert seen == expected


def test_row_groups_before_start_are_not_read(tmp_path: Path) -> None:
    """Corrupt row group 0's data (detected by its page checksum): reading from row group 1 works."""
    path, size = parquet(tmp_path / "a.parquet", 0, 40, 10, **CHECKSUMMED)
    flip_last_value(path, row_group=0, column=0)
    task = files_task(FileSlice(path, size, rows=40))
    assert read_ids(task, start_row=10)[0] == list(range(10, 40))
    with pytest.raises(CorruptFileError, match=r"a\.parquet") as exc:
        read_ids(task, start_row=5)
    assert exc.value.path == path


def test_slices_before_start_are_not_opened(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all" * 10)
    path, size = parquet(tmp_path / "b.parquet", 100, 20, 10)
    task = files_task(FileSlice(str(garbage), 180, rows=50), FileSlice(path, size, rows=20))
    assert read_ids(task, start_row=50)[0] == list(range(100, 120))
    assert read_ids(task, start_row=60, end_row=65)[0] == list(range(110, 115))


def test_only_requested_columns_in_requested_order(tmp_path: Path) -> None:
    path, size = parquet(tmp_path / "a.parquet", 0, 10, 5)
    batches = list(
        read_task(
            files_task(FileSlice(path, size, rows=10)),
            fmt="parquet",
            columns=["other", "row_id", "other"],
            batch_rows=4,
        )
    )
    assert all(b.schema.names == ["other", "row_id"] for b in batches)
    assert [v for b in batches for v in b.column("other").to_pylist()] == [f"x{i}" for i in range(10)]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_text_formats_across_files(tmp_path: Path, fmt: str) -> None:
    slices = []
    for n, (first, rows) in enumerate([(0, 13), (100, 1), (200, 30)]):
        path = tmp_path / f"f{n}.{fmt}"
        table = ids_table(first, rows)
        if fmt == "csv":
            pacsv.write_csv(table, path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
        slices.append(FileSlice(str(path), path.stat().st_size))
    task = files_task(*slices)
    expected = [*range(13), 100, *range(200, 230)]
    assert task_row_count(task, fmt) == 44
    for start, end in [(0, None), (5, 14), (13, 14), (12, 40), (14, None)]:
        ids, sizes = read_ids(task, fmt, batch_rows=4, start_row=start, end_row=end)
        assert ids == expected[start:end]
        assert exact_batches(sizes, 4, len(expected[start:end]))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_planned_grouped_tasks_cover_every_row_once(tmp_path: Path, hours, fmt: str) -> None:
    for i, t in enumerate(hours[:3]):
        for f in range(3):
            write(
                hour_dir(tmp_path, t) / f"part-{f}.{fmt}", fmt, 20, offset=(i * 3 + f) * 20, row_group_size=6
            )
    spec = load_data_spec(spec_doc([files_source("s", tmp_path, fmt)]))
    graph = plan(spec, hours[0], hours[2] + timedelta(hours=1), PlanOptions(min_rows=1000, target_rows=1000))
    assert any(len(t.slices) > 1 for t in graph.tasks)  # small files were merged into grouped tasks
    seen: list[int] = []
    for task in graph.tasks:
        count = task_row_count(task, fmt)
        got = [
            v
            for b in read_task(task, fmt=fmt, columns=["user_id", "price"], batch_rows=16)
            for v in b.column("user_id").to_pylist()
        ]
        assert len(got) == count
        seen += got
    assert sorted(seen) == list(range(180))


def test_grouped_task_split_at_row_group_boundaries_by_the_planner(tmp_path: Path, hours) -> None:
    write(hour_dir(tmp_path, hours[0]) / "big.parquet", "parquet", 500, row_group_size=50)
    spec = load_data_spec(spec_doc([files_source("s", tmp_path)]))
    graph = plan(spec, hours[0], hours[0] + timedelta(hours=1), PlanOptions(min_rows=10, target_rows=120))
    assert len(graph.tasks) > 1 and all(s.row_group_start is not None for t in graph.tasks for s in t.slices)
    seen = []
    for task in graph.tasks:
        mid = task_row_count(task, "parquet") // 3
        for lo, hi in ((0, mid), (mid, None)):
            for b in read_task(
                task, fmt="parquet", columns=["user_id"], batch_rows=9, start_row=lo, end_row=hi
            ):
                seen += b.column("user_id").to_pylist()
    assert sorted(seen) == list(range(500)) and len(seen) == 500


# -- errors ---------------------------------------------------------------------------------------------


def test_truncated_parquet(tmp_path: Path) -> None:
    path, size = parquet(tmp_path / "t.parquet", 0, 100, 10)
    Path(path).write_bytes(Path(path).read_bytes()[: size // 2])
    with pytest.raises(CorruptFileError, match=r"t\.parquet") as exc:
        read_ids(files_task(FileSlice(path, size, rows=100)))
    assert exc.value.path == path


def test_garbage_parquet(tmp_path: Path) -> None:
    bad = tmp_path / "g.parquet"
    bad.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(CorruptFileError, match=r"g\.parquet"):
        read_ids(files_task(FileSlice(str(bad), 10240)))
    with pytest.raises(CorruptFileError, match=r"g\.parquet"):
        task_row_count(files_task(FileSlice(str(bad), 10240)), "parquet")


def test_corrupt_page_mid_file_is_a_corrupt_file(tmp_path: Path) -> None:
    """A flipped value byte decodes fine; only the page checksum (written, and verified) catches it."""
    path, size = parquet(tmp_path / "m.parquet", 0, 60, 20, **CHECKSUMMED)
    flip_last_value(path, row_group=2, column=1)
    ids: list[int] = []
    with pytest.raises(CorruptFileError, match=r"m\.parquet.*decoding.*CRC"):
        for b in read_task(
            files_task(FileSlice(path, size, rows=60)), fmt="parquet", columns=COLUMNS, batch_rows=5
        ):
            ids += b.column("row_id").to_pylist()
    # Whatever was served before the failure is correct; nothing of the bad row group is served.
    assert ids == list(range(len(ids))) and len(ids) <= 40


def test_malformed_csv_is_a_corrupt_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("row_id,feature\n1,2\n3,4,5,6\n")
    with pytest.raises(CorruptFileError, match=r"bad\.csv"):
        read_ids(files_task(FileSlice(str(bad), 30)), "csv")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"row_id": 1, "feature": 2}\n{"row_id": \n')
    with pytest.raises(CorruptFileError, match=r"bad\.jsonl"):
        read_ids(files_task(FileSlice(str(bad_json), 30)), "jsonl")


def test_plan_row_count_mismatch_is_refused(tmp_path: Path) -> None:
    path, size = parquet(tmp_path / "a.parquet", 0, 30, 10)
    with pytest.raises(CorruptFileError, match="plan counted 40"):
        read_ids(files_task(FileSlice(path, size, rows=40)))
    with pytest.raises(CorruptFileError, match=r"row groups \[1, 9\) but the file has 3"):
        read_ids(files_task(FileSlice(path, size, 1, 9)))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_missing_column_names_file_and_column(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"a.{fmt}"
    write(path, fmt, 10)
    task = files_task(FileSlice(str(path), path.stat().st_size))
    with pytest.raises(SchemaMismatchError, match=rf"a\.{fmt}: column 'row_id': is not in the file") as exc:
        list(read_task(task, fmt=fmt, columns=["user_id", "row_id"], batch_rows=4))
    assert exc.value.column == "row_id" and exc.value.path == str(path)


def test_text_files_with_different_inferred_types(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("row_id,feature\n0,1\n1,2\n")
    (tmp_path / "b.csv").write_text("row_id,feature\n2,2.5\n")
    (tmp_path / "c.csv").write_text("row_id,feature\n3,abc\n")
    ab = files_task(*(FileSlice(str(tmp_path / n), 1) for n in ("a.csv", "b.csv")))
    [batch] = read_task(ab, fmt="csv", columns=COLUMNS, batch_rows=10)
    assert batch.column("feature").to_pylist() == [1.0, 2.0, 2.5]  # widened to float64
    ac = files_task(*(FileSlice(str(tmp_path / n), 1) for n in ("a.csv", "c.csv")))
    with pytest.raises(SchemaMismatchError, match=r"c\.csv: column 'feature'"):
        list(read_task(ac, fmt="csv", columns=COLUMNS, batch_rows=10))


def test_missing_file_is_an_os_error_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_ids(files_task(FileSlice(str(tmp_path / "gone.parquet"), 1)))
    ok = files_task(FileSlice(str(tmp_path / "gone.parquet"), 1))
    with pytest.raises(ValueError, match="batch_rows"):
        read_task(ok, fmt="parquet", columns=COLUMNS, batch_rows=0)
    with pytest.raises(ValueError, match="format"):
        read_task(ok, fmt="orc", columns=COLUMNS, batch_rows=1)
    with pytest.raises(ValueError, match="kafka"):
        read_task(Task("k", "s", "kafka", "g"), fmt="parquet", columns=COLUMNS, batch_rows=1)


def test_explicit_filesystem(tmp_path: Path) -> None:
    _, size = parquet(tmp_path / "a.parquet", 0, 12, 5)
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    task = files_task(FileSlice("a.parquet", size, rows=12))
    ids, _ = read_ids(task, filesystem=fs, start_row=2)
    assert ids == list(range(2, 12))
