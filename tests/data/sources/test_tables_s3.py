"""Iceberg and Delta tables on the session's real S3 server (SeaweedFS): planned from their metadata
on the store and read back, with the key pair named by the source's storage section (from the
environment, as executors get it), never written into the document."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.cache import PlanCache
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from airflow_provider_primus.embedded.s3 import S3State
from tests.data.conftest import spec_doc
from tests.data.sources.iceberg_tables import ARROW_SCHEMA, T0, rows
from tests.s3_helpers import KEY_ENV, SECRET_ENV, new_bucket, storage

pytestmark = pytest.mark.s3
SCHEMA = {"sparse": ["user_id", "item_id"], "label": {"column": "clicked"}, "event_time": "ts"}


def read_ids(source: Any, graph: Any) -> list[int]:
    fs, _ = history_filesystem(source)
    return sorted(
        r
        for t in graph.tasks
        for b in read_task(
            t, fmt="parquet", columns=["row_id"], batch_rows=1000, filesystem=fs, fields=read_fields(source)
        )
        for r in b.column(0).to_pylist()
    )


@pytest.fixture
def keys(s3_server: S3State, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)


def test_an_iceberg_table_on_s3_is_planned_and_read(s3_server: S3State, keys: None, tmp_path: Path) -> None:
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import HourTransform

    warehouse = f"s3://{new_bucket(s3_server)}/warehouse"
    writer = SqlCatalog(  # the ingestion job's own catalog client, with its own credentials
        "default",
        uri=f"sqlite:///{tmp_path}/catalog.db",
        warehouse=warehouse,
        **{
            "s3.endpoint": s3_server.endpoint,
            "s3.region": s3_server.region,
            "s3.access-key-id": s3_server.access_key,
            "s3.secret-access-key": s3_server.secret_key,
        },
    )
    writer.create_namespace("lake")
    table = writer.create_table("lake.clicks", schema=ARROW_SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("ts", HourTransform(), "ts_hour")
    table = writer.load_table("lake.clicks")
    table.append(rows([0, 1], first_id=0))
    doc = {
        "name": "history",
        "type": "iceberg",
        "catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": warehouse},
        "table": "lake.clicks",
        "storage": storage(s3_server),
        "schema": SCHEMA,
    }
    spec = load_data_spec(spec_doc([doc]))
    cache = PlanCache(tmp_path / "cache.sqlite")
    graph = plan(spec, T0, T0 + timedelta(hours=2), PlanOptions(cache=cache, min_rows=1))
    assert graph.stats["history"].rows == 40 and graph.stats["history"].round_trips == 3
    assert read_ids(spec.spec.sources[0], graph) == list(range(40))
    table.append(rows([2], first_id=40))
    again = plan(spec, T0, T0 + timedelta(hours=3), PlanOptions(cache=cache, min_rows=1))
    assert again.stats["history"].round_trips == 3 and again.stats["history"].rows == 60
    cache.close()


def test_a_delta_table_on_s3_is_planned_and_read(s3_server: S3State, keys: None, tmp_path: Path) -> None:
    pytest.importorskip("deltalake")
    from deltalake import write_deltalake

    uri = f"s3://{new_bucket(s3_server)}/clicks"
    options = {
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_REGION": s3_server.region,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_FORCE_PATH_STYLE": "true",
    }
    table = rows([0, 1], first_id=0)
    write_deltalake(uri, table.append_column("d", pa.array(["x"] * len(table))), storage_options=options)
    doc = {"name": "history", "type": "delta", "uri": uri, "storage": storage(s3_server), "schema": SCHEMA}
    spec = load_data_spec(spec_doc([doc]))
    cache = PlanCache(tmp_path / "cache.sqlite")
    graph = plan(spec, T0, T0 + timedelta(hours=2), PlanOptions(cache=cache, min_rows=1))
    assert graph.stats["history"].rows == 40
    assert read_ids(spec.spec.sources[0], graph) == list(range(40))
    more = rows([2], first_id=40)
    write_deltalake(
        uri, more.append_column("d", pa.array(["x"] * len(more))), mode="append", storage_options=options
    )
    again = plan(spec, T0, T0 + timedelta(hours=3), PlanOptions(cache=cache, min_rows=1))
    assert (
        again.stats["history"].round_trips == 2 and again.stats["history"].rows == 60
    )  # a listing, a commit
    cache.close()
