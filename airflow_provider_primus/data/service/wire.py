"""What crosses process boundaries in the data service: JSON for control messages, Arrow for data."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from typing import Any

from airflow_provider_primus.data.model import FileSlice, Task


def task_to_dict(task: Task) -> dict[str, Any]:
    d = asdict(task)
    d["partition_time"] = task.partition_time.isoformat() if task.partition_time else None
    return d


def task_from_dict(d: dict[str, Any]) -> Task:
    d = dict(d)
    d["slices"] = tuple(FileSlice(**s) for s in d["slices"])
    d["partition_time"] = datetime.fromisoformat(d["partition_time"]) if d["partition_time"] else None
    return Task(**d)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | memoryview | None) -> Any:
    return json.loads(bytes(data)) if data else None
