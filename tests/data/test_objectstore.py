"""Files sources on ``s3://`` against the session's real S3-compatible server (SeaweedFS).

Planning lists partitions and reads footers with ranged reads, executors read row groups with ranged
reads; a rewritten object is re-planned (cache) or refused (read); missing objects, denied
credentials and an unreachable store are clear errors naming the source.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_primus.contracts import validate_data_spec
from airflow_provider_primus.data.cache import PlanCache
from airflow_provider_primus.data.errors import FileChangedError
from airflow_provider_primus.data.objectstore import MissingObjectError, ObjectStoreError
from airflow_provider_primus.data.planner import PlanOptions, plan
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.sources.files import describe_file, open_source_filesystem
from airflow_provider_primus.embedded.s3 import S3State
from tests.data.conftest import T0, spec_doc, table
from tests.s3_helpers import (
    KEY_ENV,
    SECRET_ENV,
    CountingHandler,
    Gate,
    admin_fs,
    new_bucket,
    opened_after,
    storage,
)

pytestmark = pytest.mark.s3

COLUMNS = ["user_id", "item_id", "price", "rating"]


@pytest.fixture
def creds(s3_server: S3State, monkeypatch: pytest.MonkeyPatch) -> S3State:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)
    return s3_server


def put_parquet(state: S3State, key: str, rows: int, offset: int = 0, row_group_size: int = 10_000) -> None:
    with admin_fs(state).open_output_stream(key) as out:
        pq.write_table(table(rows, offset), out, row_group_size=row_group_size)


def s3_spec(state: S3State, bucket: str, **storage_extra: Any) -> Any:
    source = {
        "name": "clicks",
        "type": "files",
        "format": "parquet",
        "uri": f"s3://{bucket}/history",
        "path_template": "{date}/{hour}",
        "granularity": "hour",
        "storage": storage(state, **storage_extra),
        "schema": {"sparse": ["user_id", "item_id"], "dense": ["price"], "label": {"rule": "rating >= 4"}},
    }
    return validate_data_spec(spec_doc([source], planning={"target_rows_per_task": 10_000}))


def hour_key(bucket: str, hour: int, name: str = "part-0.parquet") -> str:
    t = T0 + timedelta(hours=hour)
    return f"{bucket}/history/{t:%Y-%m-%d}/{t:%H}/{name}"


def read_all(task: Any, fs: pafs.FileSystem) -> pa.Table:
    return pa.Table.from_batches(
        list(read_task(task, fmt="parquet", columns=COLUMNS, batch_rows=4096, filesystem=fs))
    )


def test_plan_and_read_a_window_from_s3(creds: S3State) -> None:
    bucket = new_bucket(creds)
    put_parquet(creds, hour_key(bucket, 0), 30_000)
    put_parquet(creds, hour_key(bucket, 1), 20_000, offset=30_000)
    spec = s3_spec(creds, bucket)
    graph = plan(spec, T0, T0 + timedelta(hours=2))
    assert graph.stats["clicks"].partitions == 2
    assert graph.stats["clicks"].rows == 50_000
    assert all(s.version for t in graph.tasks for s in t.slices), "every slice carries the object's ETag"
    fs, _ = open_source_filesystem(spec.spec.sources[0])
    ids = sorted(v for t in graph.tasks for v in read_all(t, fs).column("user_id").to_pylist())
    assert ids == list(range(50_000))


def test_footers_and_row_groups_are_read_with_ranged_reads(creds: S3State) -> None:
    """The planner fetches a footer, an executor one row group: never the whole object."""
    bucket = new_bucket(creds)
    key = hour_key(bucket, 0)
    put_parquet(creds, key, 400_000, row_group_size=50_000)  # 8 row groups
    spec = s3_spec(creds, bucket)
    real, _ = open_source_filesystem(spec.spec.sources[0])
    size = real.get_file_info(key).size
    assert size > 4_000_000

    handler = CountingHandler(real)
    counting = pafs.PyFileSystem(handler)
    info = describe_file(counting, real.get_file_info(key), "parquet")
    assert info.row_groups == (50_000,) * 8
    assert handler.counter["bytes"] < size * 0.02, handler.counter

    graph = plan(spec, T0, T0 + timedelta(hours=1), PlanOptions(target_rows=50_000))
    one = next(t for t in graph.tasks if t.slices[0].row_group_start == 3)
    handler.counter.update(bytes=0, reads=0)
    got = read_all(one, counting)
    assert got.num_rows == 50_000
    assert got.column("user_id")[0].as_py() == 150_000
    # One row group's column chunks plus the footer: about an eighth of the object.
    assert handler.counter["bytes"] < size * 0.25, (handler.counter, size)


def test_a_rewritten_object_is_replanned_from_the_cache(creds: S3State, tmp_path: Path) -> None:
    bucket = new_bucket(creds)
    put_parquet(creds, hour_key(bucket, 0), 1_000)
    put_parquet(creds, hour_key(bucket, 1), 2_000)
    spec = s3_spec(creds, bucket)
    cache = PlanCache(tmp_path / "cache.sqlite")
    try:
        first = plan(spec, T0, T0 + timedelta(hours=2), PlanOptions(cache=cache))
        again = plan(spec, T0, T0 + timedelta(hours=2), PlanOptions(cache=cache))
        assert again.stats["clicks"].cached_partitions == 2
        assert {t.task_id for t in again.tasks} == {t.task_id for t in first.tasks}
        put_parquet(creds, hour_key(bucket, 1), 2_500, offset=7)  # rewritten in place
        third = plan(spec, T0, T0 + timedelta(hours=2), PlanOptions(cache=cache))
    finally:
        cache.close()
    assert third.stats["clicks"].cached_partitions == 1
    assert third.stats["clicks"].rows == 3_500
    assert {t.task_id for t in third.tasks} != {t.task_id for t in first.tasks}


def test_an_object_rewritten_between_plan_and_read_is_refused(creds: S3State) -> None:
    bucket = new_bucket(creds)
    put_parquet(creds, hour_key(bucket, 0), 1_000)
    spec = s3_spec(creds, bucket)
    graph = plan(spec, T0, T0 + timedelta(hours=1))
    put_parquet(creds, hour_key(bucket, 0), 1_000, offset=5)  # same size, other bytes: other ETag
    fs, _ = open_source_filesystem(spec.spec.sources[0])
    with pytest.raises(FileChangedError, match=r"source 'clicks'.*rewritten after it was planned") as err:
        read_all(graph.tasks[0], fs)
    assert hour_key(bucket, 0) in str(err.value)


def test_a_missing_object_names_the_source_and_key(creds: S3State) -> None:
    bucket = new_bucket(creds)
    put_parquet(creds, hour_key(bucket, 0), 1_000)
    spec = s3_spec(creds, bucket)
    graph = plan(spec, T0, T0 + timedelta(hours=1))
    admin_fs(creds).delete_file(hour_key(bucket, 0))
    fs, _ = open_source_filesystem(spec.spec.sources[0])
    with pytest.raises(MissingObjectError, match="source 'clicks'") as err:
        read_all(graph.tasks[0], fs)
    assert hour_key(bucket, 0) in str(err.value)
    assert isinstance(err.value, FileNotFoundError)  # still what callers of the reader expect


def test_a_denied_credential_is_a_clear_error_naming_the_source(
    s3_server: S3State, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = new_bucket(s3_server)
    put_parquet(s3_server, hour_key(bucket, 0), 100)
    wrong = "not-the-secret-" + s3_server.secret_key[:6]
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, wrong)
    spec = s3_spec(s3_server, bucket, max_attempts=2)
    with pytest.raises(ObjectStoreError, match=r"source 'clicks'.*refused the credentials") as err:
        plan(spec, T0, T0 + timedelta(hours=1))
    assert wrong not in str(err.value) and s3_server.secret_key not in str(err.value)


def test_credentials_missing_from_the_environment_are_named(
    s3_server: S3State, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(SECRET_ENV, raising=False)
    spec = s3_spec(s3_server, "any-bucket")
    with pytest.raises(ObjectStoreError, match=f"source 'clicks'.*{KEY_ENV}, {SECRET_ENV}"):
        plan(spec, T0, T0 + timedelta(hours=1))


def test_a_briefly_unreachable_store_is_retried(creds: S3State) -> None:
    bucket = new_bucket(creds)
    put_parquet(creds, hour_key(bucket, 0), 1_000)
    gate = Gate(creds.s3_port)
    spec = s3_spec(creds, bucket, endpoint=gate.endpoint, max_attempts=10)
    with opened_after(gate, 1.0):
        graph = plan(spec, T0, T0 + timedelta(hours=1))
    assert graph.stats["clicks"].rows == 1_000


def test_a_store_that_stays_unreachable_is_a_clear_error(creds: S3State) -> None:
    gate = Gate(creds.s3_port)  # never opened: connections are refused
    spec = s3_spec(creds, "any-bucket", endpoint=gate.endpoint, max_attempts=3, connect_timeout_s=1.0)
    with pytest.raises(ObjectStoreError, match=r"source 'clicks'.*unreachable"):
        plan(spec, T0, T0 + timedelta(hours=1))
