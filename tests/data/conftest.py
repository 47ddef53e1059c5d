from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def seconds_data_document(root: Path, event_time: object, hours: int = 2) -> dict[str, Any]:
    """Hourly Parquet history under ``root/store`` whose ``ts`` holds epoch **seconds** (as most logs
    carry them), and the PrimusData document reading it with ``event_time`` as declared."""
    for h in range(hours):
        t = T0 + timedelta(hours=h)
        part = root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True, exist_ok=True)
        seconds = int(t.timestamp())
        rows = pa.table(
            {"user_id": [1, 2], "clicked": [1, 0], "ts": pa.array([seconds, seconds + 1], pa.int64())}
        )
        pq.write_table(rows, part / "part-0.parquet")
    schema = {"sparse": ["user_id"], "label": {"column": "clicked"}, "event_time": event_time}
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "seconds"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()},
            "sources": [
                {
                    "name": "history",
                    "type": "files",
                    "format": "parquet",
                    "uri": str(root / "store"),
                    "path_template": "{date}/{hour}",
                    "granularity": "hour",
                    "schema": schema,
                }
            ],
        },
    }


def table(rows: int, offset: int = 0) -> pa.Table:
    ids = list(range(offset, offset + rows))
    return pa.table(
        {
            "user_id": pa.array(ids, pa.int64()),
            "item_id": pa.array([i * 7 for i in ids], pa.int64()),
            "price": pa.array([i / 10 for i in ids], pa.float64()),
            "rating": pa.array([i % 5 + 1 for i in ids], pa.int64()),
        }
    )


def write(path: Path, fmt: str, rows: int, offset: int = 0, row_group_size: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = table(rows, offset)
    if fmt == "parquet":
        pq.write_table(t, path, row_group_size=row_group_size)
    elif fmt == "csv":
        pacsv.write_csv(t, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in t.to_pylist()))


def spec_doc(sources: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "test"},
        "spec": {"sources": sources, **spec},
    }


def files_source(
    name: str, root: Path, fmt: str = "parquet", granularity: str = "hour", **kw: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "type": "files",
        "format": fmt,
        "uri": str(root),
        "path_template": "{date}/{hour}" if granularity == "hour" else "{date}",
        "granularity": granularity,
        "schema": {"sparse": ["user_id", "item_id"], "dense": ["price"], "label": {"rule": "rating >= 4"}},
        **kw,
    }


def hour_dir(root: Path, t: datetime) -> Path:
    return root / t.strftime("%Y-%m-%d") / t.strftime("%H")


@pytest.fixture
def hours() -> list[datetime]:
    return [T0 + timedelta(hours=h) for h in range(6)]
