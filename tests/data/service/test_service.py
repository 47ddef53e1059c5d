"""The data service end to end: a dispatcher, real executor processes, Flight, the loader."""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from pyarrow import flight

from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.service.launch import ExecutorProcess as ExecutorProcess_
from airflow_provider_primus.data.service.loader import PrimusDataLoader
from airflow_provider_primus.data.service.wire import loads
from tests.data.service.conftest import DENSE, SPARSE, T0, ExecutorProcess, Store, start_dispatcher


def loader_for(location: str, token: str, **kw) -> PrimusDataLoader:
    kw.setdefault("stall_timeout_s", 60)  # a hang fails the test with the dispatcher status
    return PrimusDataLoader(location, token, sparse=SPARSE, dense=DENSE, extra=["row_id"], **kw)


def row_ids(batches) -> list[int]:
    return [int(x) for b in batches for x in b.extra["row_id"]]


def test_every_row_once_with_two_executors(store: Store, token: str, executors) -> None:
    server = start_dispatcher(store.graph(), token)
    try:
        executors += [ExecutorProcess(f"e{i}", server.location, store.spec_path, token) for i in range(2)]
        batches = list(loader_for(server.location, token))
        ids = row_ids(batches)
        assert Counter(ids) == Counter(range(store.rows))
        first = batches[0]
        assert first.sparse.shape[1] == 2 and first.dense.shape[1] == 1
        assert int(first.sparse[:, 0].max()) < 1000  # user_id hashed into 1000 buckets
        assert set(first.labels.unique().tolist()) <= {0.0, 1.0}
        assert server.dispatcher.finished()
    finally:
        server.stop()


def test_kill_minus_nine_at_random_points_delivers_each_planned_row_exactly_once(
    store: Store, token: str, executors
) -> None:
    rng = random.Random(20261129)
    graph = store.graph()
    planned = Counter(range(store.rows))
    for trial in range(10):
        server = start_dispatcher(graph, token)
        try:
            pool: list[ExecutorProcess_] = []
            for i in range(2):  # registered one by one: a failed start must not leak the first
                pool.append(ExecutorProcess(f"t{trial}-e{i}", server.location, store.spec_path, token))
                executors.append(pool[-1])
            kill_at = rng.randrange(0, store.rows)
            victim = rng.randrange(0, 2)
            ids: list[int] = []
            loader = loader_for(server.location, token)
            for batch in loader:
                ids.extend(int(x) for x in batch.extra["row_id"])
                if kill_at is not None and len(ids) >= kill_at:
                    pool[victim].kill()
                    kill_at = None  # type: ignore[assignment]
                    executors.append(ExecutorProcess(f"t{trial}-r", server.location, store.spec_path, token))
            assert Counter(ids) == planned, f"trial {trial}: rows lost or repeated"
        finally:
            server.stop()
            for e in executors:
                e.stop()


@pytest.mark.parametrize("batch_rows", [None, 100])
def test_resume_from_saved_progress_loses_and_repeats_nothing(
    store: Store, token: str, executors, batch_rows: int | None
) -> None:
    """With ``batch_rows`` the loader cuts the executors' 256-row messages into 100-row batches, so
    the checkpoint falls inside a message: its consumed part must count, its rest must not."""
    graph = store.graph()
    server = start_dispatcher(graph, token)
    first: list[int] = []
    try:
        executors.append(ExecutorProcess("a", server.location, store.spec_path, token))
        loader = loader_for(server.location, token, batch_rows=batch_rows)
        for batch in loader:
            assert batch_rows is None or len(batch) <= batch_rows
            first.extend(int(x) for x in batch.extra["row_id"])
            if len(first) >= store.rows // 3:
                break
        saved = loader.progress()  # what a checkpoint stores
    finally:
        server.stop()
        executors[0].stop()
    assert sum(b - a for ranges in saved.values() for a, b in ranges) == len(first)
    server = start_dispatcher(graph, token, progress=saved)
    try:
        executors.append(ExecutorProcess("b", server.location, store.spec_path, token))
        rest = row_ids(loader_for(server.location, token, progress=saved, batch_rows=batch_rows))
    finally:
        server.stop()
    assert not set(first) & set(rest)
    assert Counter(first + rest) == Counter(range(store.rows))


def test_rows_whose_acknowledgement_the_dispatcher_lost_are_acknowledged_again(
    store: Store, token: str, executors
) -> None:
    """A master killed between two saves of its progress restarts its dispatcher from the last one,
    while the trainer (alive) already has the later rows. The dispatcher offers them again; the
    loader drops them as duplicates — and must acknowledge them, or their tasks never complete and
    the pass never ends (it hung here until the stall timeout)."""
    graph = store.graph()
    server = start_dispatcher(graph, token)
    try:
        executors.append(ExecutorProcess("a", server.location, store.spec_path, token))
        loader = loader_for(server.location, token)
        assert Counter(row_ids(loader)) == Counter(range(store.rows))
        acked = server.dispatcher.progress()
    finally:
        server.stop()
        executors[0].stop()
    # The last save the restarted master finds: every other task's acknowledgements are missing.
    saved = {t: r for i, (t, r) in enumerate(sorted(acked.items())) if i % 2}
    lost = store.rows - sum(b - a for r in saved.values() for a, b in r)
    assert 0 < lost < store.rows
    server = start_dispatcher(graph, token, progress=saved)
    try:
        executors.append(ExecutorProcess("b", server.location, store.spec_path, token))
        again = loader_for(server.location, token, progress=loader.progress(), stall_timeout_s=20)
        assert row_ids(again) == []  # nothing is yielded twice ...
        assert again.duplicates_dropped >= lost  # ... what the dispatcher lost came back ...
        assert server.dispatcher.finished()  # ... and was acknowledged
    finally:
        server.stop()


def test_slow_consumer_keeps_executor_memory_bounded(tmp_path: Path, token: str, executors) -> None:
    store = Store(tmp_path, hours=2, files=4, rows=20_000)
    server = start_dispatcher(store.graph(), token)
    try:
        window, credits = 4, 2
        ex = ExecutorProcess("slow", server.location, store.spec_path, token, window=window, batch_rows=1000)
        executors.append(ex)
        client = flight.FlightClient(ex.location)
        from airflow_provider_primus.data.service.auth import call_options

        loader = loader_for(server.location, token, credits=credits)
        consumed = 0
        rss = []
        for _batch in loader:
            consumed += 1
            if consumed % 10 == 0:
                time.sleep(0.05)  # the deliberately slow trainer
                metrics = loads(
                    next(
                        iter(client.do_action(flight.Action("metrics", b""), call_options(token)))
                    ).body.to_pybytes()
                )
                # Never more than its window waiting, never more than the granted credits in flight.
                assert metrics["max_queued"] <= window
                assert metrics["batches_served"] <= consumed + credits + 1
                rss.append(psutil.Process(ex.proc.pid).memory_info().rss)
            if consumed >= 100:
                break
        # 160,000 rows exist; the executor read only about what the trainer consumed plus its window.
        metrics = loads(
            next(iter(client.do_action(flight.Action("metrics", b""), call_options(token)))).body.to_pybytes()
        )
        assert metrics["rows"] <= (consumed + credits + 1) * 1000
        assert metrics["blocked_credit_s"] > 0
        assert max(rss) - min(rss) < 64 * 1024 * 1024
    finally:
        server.stop()


def test_corrupt_file_is_quarantined_and_the_job_continues(store: Store, token: str, executors) -> None:
    bad = store.root / "store" / T0.strftime("%Y-%m-%d") / "00" / "part-9.parquet"
    good = bad.with_name("part-0.parquet").read_bytes()
    bad.write_bytes(good[: len(good) // 2])  # truncated
    graph = plan(store.spec, T0, T0 + timedelta(hours=store.hours), PlanOptions())
    assert any("part-9.parquet" in p for p in graph.problems)
    server = start_dispatcher(graph, token, max_attempts=2, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        ids = row_ids(loader_for(server.location, token))
        assert Counter(ids) == Counter(range(store.rows))  # every good row, once
        status = DispatcherClient(server.location, token).status()
        [(_task_id, errors)] = status["quarantined"].items()
        assert len(errors) == 2 and all("part-9.parquet" in e for e in errors)
    finally:
        server.stop()


def test_schema_mismatch_names_file_and_column(store: Store, token: str, executors) -> None:
    import pyarrow.parquet as pq

    from tests.data.service.conftest import click_table

    odd = store.root / "store" / T0.strftime("%Y-%m-%d") / "01" / "part-7.parquet"
    pq.write_table(click_table(10**9, 100, seed=1).drop_columns(["price"]), odd)
    server = start_dispatcher(store.graph(), token, max_attempts=1, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        list(loader_for(server.location, token))
        [errors] = DispatcherClient(server.location, token).status()["quarantined"].values()
        assert "part-7.parquet" in errors[0] and "price" in errors[0]
    finally:
        server.stop()


def test_a_corrupted_page_is_caught_by_its_checksum_and_quarantined_with_file_and_rows(
    store: Store, token: str, executors
) -> None:
    """200 bytes flipped in a data page of a checksummed file: the task is quarantined, and its
    quarantine names the source, the file, the rows never delivered and the checksum error."""
    import pyarrow.parquet as pq

    from tests.data.service.conftest import click_table

    bad = store.root / "store" / T0.strftime("%Y-%m-%d") / "01" / "part-1.parquet"
    first_id = 4 * 3000  # hour 01, file 1 (the store numbers rows file by file)
    pq.write_table(click_table(first_id, 3000, seed=101), bad, row_group_size=500, write_page_checksum=True)
    chunk = pq.ParquetFile(bad).metadata.row_group(4).column(0)  # row_id, rows 2000..2500 of the file
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    middle = (chunk.data_page_offset + end) // 2  # of the chunk's data pages
    assert end - chunk.data_page_offset > 400
    data = bytearray(bad.read_bytes())
    for i in range(middle - 100, middle + 100):
        data[i] ^= 0xFF
    bad.write_bytes(bytes(data))
    graph = store.graph()  # the footer is intact: the plan sees a good file
    [task] = [
        t
        for t in graph.tasks
        if any(s.path.endswith("01/part-1.parquet") and s.row_group_start == 3 for s in t.slices)
    ]
    server = start_dispatcher(graph, token, max_attempts=2, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        ids = row_ids(loader_for(server.location, token))
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    [(task_id, info)] = status["quarantine"].items()
    assert task_id == task.task_id and info["source"] == "clicks"
    assert info["file"].endswith("01/part-1.parquet") and info["files"] == [s.path for s in task.slices]
    assert "CRC checksum" in info["error"] and info["attempts"] == 2
    first, end = info["rows"]
    assert end == 1500 and first <= 500 and info["rows_missing"] == end - first  # row group 4 is rows 500..
    missing = set(range(first_id + 1500 + first, first_id + 1500 + end))
    assert Counter(ids) == Counter(i for i in range(store.rows) if i not in missing)  # the rest, once


def _with_unlabelled_file(store: Store, **schema: object) -> tuple[set[int], str]:
    """A file whose rating (the label rule's input) is null on every 7th row; its row ids, missing ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from tests.data.service.conftest import click_table

    table = click_table(10**6, 1200, seed=7)
    ratings = [None if i % 7 == 0 else r for i, r in enumerate(table.column("rating").to_pylist())]
    table = table.set_column(table.schema.get_field_index("rating"), "rating", pa.array(ratings, pa.int64()))
    path = store.root / "store" / T0.strftime("%Y-%m-%d") / "00" / "part-5.parquet"
    pq.write_table(table, path, row_group_size=500)
    doc = yaml.safe_load(store.spec_path.read_text())
    doc["spec"]["sources"][0]["schema"].update(schema)
    store.spec_path.write_text(yaml.safe_dump(doc))
    return {10**6 + i for i in range(1200) if i % 7 == 0}, str(path)


def test_rows_without_a_label_are_left_out_and_counted_per_task(store: Store, token: str, executors) -> None:
    unlabelled, path = _with_unlabelled_file(store)
    graph = store.graph()
    [task] = [t for t in graph.tasks if any(s.path == path for s in t.slices)]
    server = start_dispatcher(graph, token)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        ids = row_ids(loader_for(server.location, token))
        assert server.dispatcher.finished()  # the rows left out do not hold their task open
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    labelled = [*range(store.rows), *(10**6 + i for i in range(1200) if i % 7)]
    assert Counter(ids) == Counter(labelled)
    assert status["rows_without_label"] == {task.task_id: len(unlabelled)}
    assert not status["quarantined"]


def test_missing_label_fail_quarantines_the_task_naming_its_file(store: Store, token: str, executors) -> None:
    _, path = _with_unlabelled_file(store, missing_label="fail")
    graph = store.graph()
    [task] = [t for t in graph.tasks if any(s.path == path for s in t.slices)]
    server = start_dispatcher(graph, token, max_attempts=1, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        ids = row_ids(loader_for(server.location, token))
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    assert not [i for i in ids if i >= 10**6]  # the first batch already has a row without a label
    assert Counter(ids) == Counter(range(store.rows))
    info = status["quarantine"][task.task_id]
    assert info["file"] == path and info["rows"] == [0, 1200] and info["rows_missing"] == 1200
    assert info["error"].startswith(f"MissingLabelError: {path}: column 'rating': ")
    assert "missing_label is 'fail'" in info["error"]


def test_token_is_required(store: Store, token: str, executors) -> None:
    server = start_dispatcher(store.graph(), token)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        with pytest.raises(flight.FlightUnauthenticatedError):
            DispatcherClient(server.location, "wrong").status()
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(flight.FlightClient(server.location).do_action(flight.Action("status", b"{}")))
        # A data executor refuses a consumer without the token.
        with pytest.raises(flight.FlightUnauthenticatedError):
            _writer, reader = flight.FlightClient(executors[0].location).do_exchange(
                flight.FlightDescriptor.for_command(b"consume")
            )
            reader.read_chunk()
        assert executors[0].location.startswith("grpc://127.0.0.1:")
    finally:
        server.stop()


def test_a_file_rewritten_after_planning_is_quarantined_and_none_of_its_new_rows_trained(
    store: Store, token: str, executors
) -> None:
    """Same schema, same row count, new rows: the plan's row count cannot tell. The task is
    quarantined as a corrupt one is, naming the file and why; every other planned row trains once."""
    import pyarrow.parquet as pq

    from tests.data.service.conftest import click_table

    graph = store.graph()
    changed = store.root / "store" / (T0 + timedelta(hours=1)).strftime("%Y-%m-%d/%H") / "part-2.parquet"
    first_id = 5 * 3000  # hour 01, file 2 (the store numbers rows file by file)
    unplanned = range(10**6, 10**6 + 3000)
    pq.write_table(click_table(unplanned[0], 3000, seed=7), changed, row_group_size=500)
    changed_tasks = {t.task_id for t in graph.tasks if any(s.path == str(changed) for s in t.slices)}
    server = start_dispatcher(graph, token, max_attempts=2, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        ids = row_ids(loader_for(server.location, token))
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    assert set(status["quarantine"]) == changed_tasks
    for info in status["quarantine"].values():
        assert info["file"] == str(changed) and info["source"] == "clicks" and info["attempts"] == 2
        assert "FileChangedError" in info["error"] and "changed after planning" in info["error"]
        assert str(changed) in info["error"]
    assert not set(ids) & set(unplanned)  # no row the plan never counted
    planned = (i for i in range(store.rows) if not first_id <= i < first_id + 3000)
    assert Counter(ids) == Counter(planned)  # every other planned row, once
