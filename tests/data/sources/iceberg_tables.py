"""Real Iceberg tables for the tests: a SQL catalog on SQLite and a warehouse on local disk, written
with pyiceberg as a lakehouse job would write them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

T0 = datetime(2026, 3, 1, tzinfo=UTC)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("row_id", pa.int64()),
        pa.field("user_id", pa.int64()),
        pa.field("item_id", pa.int64()),
        pa.field("price", pa.float64()),
        pa.field("clicked", pa.int64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)


def catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog("default", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")


def create(root: Path, name: str = "lake.clicks", *, partition: str | None = "hour") -> Any:
    """An empty table partitioned by ``hours(ts)`` (or ``days(ts)``, or not at all)."""
    from pyiceberg.transforms import DayTransform, HourTransform

    cat = catalog(root)
    namespace = name.rsplit(".", 1)[0]
    cat.create_namespace_if_not_exists(namespace)
    table = cat.create_table(name, schema=ARROW_SCHEMA)
    if partition is not None:
        with table.update_spec() as spec:
            transform = HourTransform() if partition == "hour" else DayTransform()
            spec.add_field("ts", transform, f"ts_{partition}")
    return cat.load_table(name)


def rows(hours: list[int], per_hour: int = 20, first_id: int = 0) -> pa.Table:
    """``per_hour`` rows in each hour after T0 listed; row ids count from ``first_id``."""
    out: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    rid = first_id
    for h in hours:
        for i in range(per_hour):
            out["row_id"].append(rid)
            out["user_id"].append(rid % 97)
            out["item_id"].append(rid % 31)
            out["price"].append(rid / 10)
            out["clicked"].append(rid % 2)
            out["ts"].append(T0 + timedelta(hours=h, seconds=60 * i))
            rid += 1
    return pa.table(out, schema=ARROW_SCHEMA)


def source(root: Path, name: str = "lake.clicks", **kw: Any) -> dict[str, Any]:
    return {
        "name": "history",
        "type": "iceberg",
        "catalog": {
            "type": "sql",
            "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}/warehouse",
        },
        "table": name,
        "granularity": "hour",
        "schema": {
            "sparse": ["user_id", "item_id"],
            "dense": ["price"],
            "label": {"column": "clicked"},
            "event_time": {"column": "ts"},
        },
        **kw,
    }
