"""What ``primus gen`` leaves on disk: the history as Parquet day folders and the PrimusData document
that reads the history and the stream.

Separate from the world (``clicklog.py``): the layout, markers and spec change with the data layer's
contracts, not with what the world generates.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.gen.clicklog import World, generate_day

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "STREAM_AHEAD_ALLOWANCE_S",
    "hash_buckets",
    "write_data_spec",
    "write_history",
    "write_history_to",
]

# A spec needs a Kafka address even when no stream is produced yet; this is the embedded broker's
# usual one, to be edited (or the stream produced) before the spec is used.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# The stream source's event_time_policy.max_ahead_s: a live world's last day is today, so its newest
# events lie up to a day ahead of the wall clock (the rest of today); the default hour would refuse them.
STREAM_AHEAD_ALLOWANCE_S = 86_400.0


def write_history(world: World, root: Path, on_day: Callable[[], None] | None = None) -> list[Path]:
    """Days ``0 .. history_days-1`` as ``root/history/{YYYY-MM-DD}/part-0.parquet`` + ``_SUCCESS``;
    ``on_day`` is called after each day is complete (a progress display).

    A stale marker from an earlier run is removed before its folder is rewritten, so a reader that
    trusts markers never sees one next to a half-written file.
    """
    paths = []
    for day in range(world.history_days):
        folder = Path(root) / "history" / world.day_start(day).date().isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / "_SUCCESS"
        marker.unlink(missing_ok=True)
        path = folder / "part-0.parquet"
        # Page checksums: a reader verifying them (the data executors do) refuses flipped bytes
        # instead of training on the plausible but wrong values they decode to.
        pq.write_table(generate_day(world, day), path, write_page_checksum=True)
        marker.write_bytes(b"")
        if on_day is not None:
            on_day()
        paths.append(path)
    return paths


def _next_prime(n: int) -> int:
    candidate = max(n, 2)
    while any(candidate % d == 0 for d in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def hash_buckets(world: World) -> tuple[int, int]:
    """(user, item) bucket counts: the next prime above 5x the IDs the whole log will hold, so about 10%
    of IDs share a bucket — collisions every training mode pays for equally."""
    last = world.days - 1
    return _next_prime(5 * world.users_on(last)), _next_prime(5 * world.items_on(last))


def _schema_section(world: World) -> dict[str, Any]:
    user_buckets, item_buckets = hash_buckets(world)
    return {
        "sparse": ["user_id", "item_id", "hour"],
        "dense": ["user_activity", "item_price"],
        "label": {"column": "clicked"},
        "event_time": "ts",
        "transforms": [
            {"column": "user_id", "hash_bucket": user_buckets},
            {"column": "item_id", "hash_bucket": item_buckets},
            # 24 values; hashed (into a prime far above 24) so the embedded training defaults can size
            # every table from the data document alone.
            {"column": "hour", "hash_bucket": 10007},
            {"column": "item_price", "fill": 0},
        ],
    }


def write_history_to(
    world: World, fs: pafs.FileSystem, root: str, on_day: Callable[[], None] | None = None
) -> list[str]:
    """The same layout on any pyarrow filesystem (an object store: ``root`` is ``bucket/prefix``).

    Each object is one PUT (or a multipart upload), visible only when complete; the marker is
    deleted first and written last, so a reader that trusts markers never sees a partial day.
    """
    paths = []
    for day in range(world.history_days):
        folder = f"{root.rstrip('/')}/history/{world.day_start(day).date().isoformat()}"
        marker = f"{folder}/_SUCCESS"
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(marker)
        path = f"{folder}/part-0.parquet"
        with fs.open_output_stream(path) as out:
            pq.write_table(generate_day(world, day), out, write_page_checksum=True)
        with fs.open_output_stream(marker):
            pass
        paths.append(path)
        if on_day is not None:
            on_day()
    return paths


def _utc_text(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_data_spec(
    world: World,
    root: Path,
    *,
    bootstrap_servers: str,
    topic: str,
    history_uri: str | None = None,
    storage: dict[str, Any] | None = None,
    kafka_security: dict[str, Any] | None = None,
) -> Path:
    """Write ``root/primus-data.yaml`` for this world's history and stream; validated before writing
    so a bad topic or address fails here, not in the first job that reads it. ``history_uri`` (and
    its ``storage`` section) when the history went to an object store; ``kafka_security``: the
    stream source's ``security`` section (a secured cluster)."""
    from airflow_provider_primus.contracts import validate_data_spec

    root = Path(root)
    document = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "clicklog"},
        "spec": {
            "window": {
                "start": _utc_text(world.start),
                "end": _utc_text(world.day_start(world.history_days)),
            },
            "ordered": True,
            "sources": [
                {
                    "name": "history",
                    "type": "files",
                    "format": "parquet",
                    "uri": history_uri or (root.resolve() / "history").as_uri(),
                    **({"storage": storage} if storage else {}),
                    "path_template": "{date}",
                    "granularity": "day",
                    "success_marker": "_SUCCESS",
                    "missing": {"policy": "fail"},
                    "schema": _schema_section(world),
                },
                {
                    "name": "events",
                    "type": "kafka",
                    "bootstrap_servers": bootstrap_servers,
                    **({"security": kafka_security} if kafka_security else {}),
                    "topic": topic,
                    "value_format": "json",
                    "event_time_field": "ts",
                    "start": {"policy": "earliest"},
                    # A live world's stream runs to the coming UTC midnight (gen.clicklog.live_start):
                    # up to a day ahead of the wall clock, by design, not by a skewed clock.
                    "event_time_policy": {"max_ahead_s": STREAM_AHEAD_ALLOWANCE_S},
                    "schema": _schema_section(world),
                },
            ],
            "mixture": [
                {"source": "history", "weight": 0.5, "priority": 0},
                {"source": "events", "weight": 0.5, "priority": 1},
            ],
        },
    }
    validate_data_spec(document)
    header = (
        f"# Generated by `primus gen` (seed {world.seed}): {world.history_days} history days from "
        f"{world.start.date()}, {world.stream_days} stream days on topic {topic!r}.\n"
    )
    path = root / "primus-data.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
