"""The task graph's Parquet form at the scale the planner must handle (≥ 100,000 tasks)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq

from airflow_provider_primus.data.graph import BATCH, SourceStats, TaskGraph, iter_tasks
from airflow_provider_primus.data.model import FileSlice, Task, task_id

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_hundred_thousand_tasks_round_trip_in_batches(tmp_path: Path) -> None:
    n = 100_000
    tasks = []
    for i in range(n):
        t = T0 + timedelta(hours=i // 100)
        piece = FileSlice(f"/store/{t:%Y-%m-%d/%H}/f{i % 100}.parquet", 4096, 0, 2, 1000, 4096)
        tasks.append(
            Task(
                task_id(f"s{i % 2}", piece.identity()),
                f"s{i % 2}",
                "files",
                f"s{i % 2}@{t.isoformat()}",
                i % 3,
                1000,
                4096,
                (piece,),
                partition_time=t,
            )
        )
    graph = TaskGraph(
        "big",
        T0,
        T0 + timedelta(hours=1000),
        tasks=tasks,
        stats={"s0": SourceStats(tasks=n // 2), "s1": SourceStats(tasks=n // 2)},
    )
    graph.canonicalize()
    out = tmp_path / "graph.parquet"
    graph.write(out)
    meta = pq.ParquetFile(str(out)).metadata
    assert meta.num_rows == n and meta.num_row_groups >= n // BATCH
    assert out.stat().st_size < 20 * 1024 * 1024
    streamed = iter_tasks(out)
    first = next(streamed)
    assert first == graph.tasks[0] and first.partition_time == graph.tasks[0].partition_time
    assert sum(1 for _ in streamed) == n - 1
    assert TaskGraph.read(out).summary() == graph.summary()
