"""The data task graph: tasks, time-ordering barriers between groups, per-source statistics.

Dependencies are kept between *groups* (all tasks of one source's partition time), not between
tasks: with ordered consumption every task of hour h+1 waits for every task of hour h, which is
O(tasks²) as task edges but O(partitions) as group barriers. Serialized as one Parquet file (one row
per task, slices as a list column) written in batches; edges, stats and missing partitions travel in
the file's key-value metadata, which stays small.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_primus.data.event_time import EventTimeFinding
from airflow_provider_primus.data.model import FileSlice, MissingPartition, Task

_SLICE = pa.struct(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("row_group_start", pa.int32()),
        ("row_group_end", pa.int32()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("version", pa.string()),
        # A file's identity where there is no ETag (``data/identity.py``); plans written before
        # these columns existed read back without them: not checked.
        ("mtime_ns", pa.int64()),
        ("footer_checksum", pa.string()),
    ]
)
TASK_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("source", pa.string()),
        ("kind", pa.string()),
        ("group", pa.string()),
        ("priority", pa.int32()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("partition_time", pa.timestamp("us", tz="UTC")),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("start_offset", pa.int64()),
        ("end_offset", pa.int64()),
        ("slices", pa.list_(_SLICE)),
    ]
)
BATCH = 10_000


@dataclass
class SourceStats:
    partitions: int = 0
    cached_partitions: int = 0
    missing_partitions: int = 0
    files: int = 0
    unreadable_files: int = 0
    implausible_event_time_files: int = 0  # by the footers' statistics, in the declared unit
    tasks: int = 0
    rows: int = 0
    bytes: int = 0
    # Table sources: the metadata, manifest-list and manifest reads the plan made (a re-plan reads
    # only new manifests), and the windows whose earlier plan's files a later snapshot removed.
    round_trips: int = 0
    rewritten_partitions: int = 0


@dataclass
class TaskGraph:
    name: str
    start: datetime | None
    end: datetime | None
    tasks: list[Task] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (group before, group after)
    missing: list[MissingPartition] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Sources whose files hold implausible event times (a unit mix-up, most often): warnings, since
    # the rows can still be read and trained; the trainer counts such rows as it uses them.
    event_times: list[EventTimeFinding] = field(default_factory=list)
    stats: dict[str, SourceStats] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return [f.message() for f in self.event_times]

    def canonicalize(self) -> None:
        """One order for the same content, whatever order the thread pool finished in."""
        self.tasks.sort(key=lambda t: (t.source, t.group, t.task_id))
        self.edges.sort()
        self.missing.sort(key=lambda m: (m.source, m.time))
        self.problems.sort()
        self.event_times.sort(key=lambda f: f.source)

    def totals(self) -> dict[str, int]:
        keys = asdict(SourceStats()).keys()
        return {k: sum(getattr(s, k) for s in self.stats.values()) for k in keys}

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            **self.totals(),
            "edges": len(self.edges),
            "missing": [f"{m.source}:{m.path} ({m.reason})" for m in self.missing],
            "problems": self.problems,
            "warnings": self.warnings,
            "sources": {name: asdict(s) for name, s in sorted(self.stats.items())},
        }

    # --- serialization -------------------------------------------------------------------------

    def write(self, path: Path) -> None:
        meta = {
            "name": self.name,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "edges": self.edges,
            "missing": [[m.source, m.time.isoformat(), m.path, m.reason] for m in self.missing],
            "problems": self.problems,
            "event_times": [f.as_dict() for f in self.event_times],
            "stats": {k: asdict(v) for k, v in self.stats.items()},
        }
        schema = TASK_SCHEMA.with_metadata({b"primus.task_graph": json.dumps(meta).encode()})
        tmp = path.with_name(path.name + ".tmp")
        with pq.ParquetWriter(str(tmp), schema, compression="zstd", write_page_checksum=True) as writer:
            for i in range(0, len(self.tasks), BATCH):
                writer.write_table(pa.Table.from_pylist([_row(t) for t in self.tasks[i : i + BATCH]], schema))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> TaskGraph:
        pf = pq.ParquetFile(str(path))
        meta = json.loads(pf.schema_arrow.metadata[b"primus.task_graph"])
        graph = cls(
            name=meta["name"],
            start=datetime.fromisoformat(meta["start"]) if meta["start"] else None,
            end=datetime.fromisoformat(meta["end"]) if meta["end"] else None,
            edges=[(a, b) for a, b in meta["edges"]],
            missing=[MissingPartition(s, datetime.fromisoformat(t), p, r) for s, t, p, r in meta["missing"]],
            problems=list(meta["problems"]),
            event_times=[EventTimeFinding.from_dict(f) for f in meta.get("event_times", [])],
            stats={k: SourceStats(**v) for k, v in meta["stats"].items()},
        )
        graph.tasks = list(iter_tasks(path))
        return graph


def _row(t: Task) -> dict[str, Any]:
    return {
        "task_id": t.task_id,
        "source": t.source,
        "kind": t.kind,
        "group": t.group,
        "priority": t.priority,
        "rows": t.rows,
        "bytes": t.bytes,
        "partition_time": t.partition_time,
        "topic": t.topic,
        "partition": t.partition,
        "start_offset": t.start_offset,
        "end_offset": t.end_offset,
        "slices": [asdict(s) for s in t.slices],
    }


def iter_tasks(path: Path) -> Iterator[Task]:
    """Stream tasks back batch by batch: a consumer never needs the whole graph in memory."""
    pf = pq.ParquetFile(str(path))
    for batch in pf.iter_batches(batch_size=BATCH):
        for row in batch.to_pylist():
            slices = tuple(FileSlice(**s) for s in row.pop("slices"))
            yield Task(**row, slices=slices)
