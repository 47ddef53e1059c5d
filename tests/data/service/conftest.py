"""Real data-service parts for tests: an in-process dispatcher, executor *processes*, real files."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.credentials import new_token
from airflow_provider_primus.data.graph import TaskGraph
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
from airflow_provider_primus.data.service.launch import ExecutorProcess as ExecutorProcess_
from airflow_provider_primus.data.service.launch import launch_executor

T0 = datetime(2026, 5, 1, tzinfo=UTC)
SPARSE = ["user_id", "item_id"]
DENSE = ["price"]


def click_table(first_id: int, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "row_id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, 10_000, rows, dtype=np.int64)),
            "item_id": pa.array(rng.integers(0, 5_000, rows, dtype=np.int64)),
            "price": pa.array(rng.random(rows)),
            "rating": pa.array(rng.integers(1, 6, rows, dtype=np.int64)),
        }
    )


class Store:
    def __init__(self, root: Path, hours: int = 2, files: int = 3, rows: int = 3000) -> None:
        self.root = root
        self.rows = 0
        for h in range(hours):
            t = T0 + timedelta(hours=h)
            part = root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
            part.mkdir(parents=True, exist_ok=True)
            for f in range(files):
                pq.write_table(
                    click_table(self.rows, rows, seed=h * 100 + f),
                    part / f"part-{f}.parquet",
                    row_group_size=500,
                )
                self.rows += rows
        self.hours = hours
        doc = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "svc"},
            "spec": {
                "planning": {"target_rows_per_task": 1500, "min_rows_per_task": 100},
                "sources": [
                    {
                        "name": "clicks",
                        "type": "files",
                        "format": "parquet",
                        "uri": str(root / "store"),
                        "path_template": "{date}/{hour}",
                        "granularity": "hour",
                        "schema": {
                            "sparse": SPARSE,
                            "dense": DENSE,
                            "label": {"rule": "rating >= 4"},
                            "transforms": [{"column": "user_id", "hash_bucket": 1000}],
                        },
                    }
                ],
            },
        }
        self.spec_path = root / "data.yaml"
        self.spec_path.write_text(yaml.safe_dump(doc))
        self.spec = load_data_spec(self.spec_path)

    def graph(self) -> TaskGraph:
        return plan(self.spec, T0, T0 + timedelta(hours=self.hours), PlanOptions())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path)


@pytest.fixture
def token() -> str:
    return new_token()


def start_dispatcher(graph: TaskGraph, token: str, **kw: Any) -> DispatcherServer:
    kw.setdefault("executor_timeout_s", 2.0)
    return DispatcherServer(Dispatcher(graph.tasks, graph.edges, **kw), token).start()


def ExecutorProcess(
    name: str, dispatcher: str, spec_path: Path, token: str, *, window: int = 4, batch_rows: int = 256
) -> ExecutorProcess_:
    """A real executor process with a fast heartbeat and the row ids passed through."""
    return launch_executor(
        name,
        dispatcher,
        spec_path,
        token,
        window=window,
        batch_rows=batch_rows,
        heartbeat_s=0.3,
        passthrough=("row_id",),
    )


@pytest.fixture
def executors() -> Iterator[list[ExecutorProcess_]]:
    started: list[ExecutorProcess_] = []
    yield started
    for e in started:
        e.stop()
