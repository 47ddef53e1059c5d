"""A python transform in the data service: real executor processes run it on every batch, and a task
whose batch it raises on is quarantined with the function's error, as a malformed file is, while
every other task's rows are served transformed."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from tests.conftest import REPO
from tests.data.service.conftest import T0, ExecutorProcess, Store, click_table, start_dispatcher
from tests.data.service.test_service import loader_for, row_ids

FUNCTION = "tests.data.transform_functions:refuses_negative_prices"


@pytest.fixture(autouse=True)
def _functions_on_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executors import the test's functions as a user's package on their path: this checkout."""
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))


def _with_python_step_and_a_file_it_refuses(store: Store) -> str:
    table = click_table(10**6, 1200, seed=7)
    prices = [-1.0 if i == 700 else p for i, p in enumerate(table.column("price").to_pylist())]
    table = table.set_column(table.schema.get_field_index("price"), "price", pa.array(prices))
    path = store.root / "store" / T0.strftime("%Y-%m-%d") / "00" / "part-5.parquet"
    pq.write_table(table, path, row_group_size=500)
    doc = yaml.safe_load(store.spec_path.read_text())
    schema = doc["spec"]["sources"][0]["schema"]
    schema["transforms"].append({"type": "python", "function": FUNCTION, "inputs": ["row_id"]})
    store.spec_path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_task_the_function_raises_on_is_quarantined_with_its_error_and_the_rest_served(
    store: Store, token: str, executors
) -> None:
    path = _with_python_step_and_a_file_it_refuses(store)
    graph = store.graph()
    [task] = [t for t in graph.tasks if any(s.path == path for s in t.slices)]
    server = start_dispatcher(graph, token, max_attempts=1, max_failed_share=0.5)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        batches = list(loader_for(server.location, token))
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    ids = row_ids(batches)
    # The refused file's rows before the batch the function raised on were served (trained), as
    # they are before a corrupt page; the rest are the quarantine's, and every other task's once.
    served = sorted(i for i in ids if i >= 10**6)
    assert served == list(range(10**6, 10**6 + len(served))) and len(served) <= 700
    assert Counter(i for i in ids if i < 10**6) == Counter(range(store.rows))
    # The function ran on them: prices doubled (raw prices are in [0, 1)).
    prices = [float(x) for b in batches for x in b.dense[:, 0]]
    assert max(prices) > 1.0 and min(prices) >= 0.0
    info = status["quarantine"][task.task_id]
    assert info["file"] == path and info["rows"] == [len(served), 1200]
    assert info["rows_missing"] == 1200 - len(served)
    assert info["error"].startswith(
        f"UserTransformError: {path}: transform {FUNCTION} raised ValueError: negative price in row(s) "
        f"[1000700] (at data/transform_functions.py:"
    ), info["error"]
    assert info["error"].endswith(" in refuses_negative_prices)")


def test_an_output_that_breaks_the_schema_quarantines_the_task_naming_function_and_column(
    store: Store, token: str, executors
) -> None:
    function = "tests.data.transform_functions:drops"
    doc = yaml.safe_load(store.spec_path.read_text())
    step = {"type": "python", "function": function, "options": {"column": "price"}}
    doc["spec"]["sources"][0]["schema"]["transforms"].append(step)
    store.spec_path.write_text(yaml.safe_dump(doc))
    graph = store.graph()
    server = start_dispatcher(graph, token, max_attempts=1, max_failed_share=1.0)
    try:
        executors.append(ExecutorProcess("e", server.location, store.spec_path, token))
        assert row_ids(loader_for(server.location, token)) == []
        status = DispatcherClient(server.location, token).status()
    finally:
        server.stop()
    assert len(status["quarantine"]) == len(graph.tasks)
    for info in status["quarantine"].values():
        assert info["error"].startswith(f"TransformOutputError: {info['file']}: transform {function}: "), info
        assert info["error"].endswith(
            "column 'price': declared column is not in the function's output (found: user_id, item_id, "
            "rating, row_id)"
        ), info
