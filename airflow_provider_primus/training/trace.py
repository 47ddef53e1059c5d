"""The training trace: one JSON line per step naming every row it trained on or scored.

An audit trail for exactly-once claims: a row is (source, origin, position), origin being the task
(files) or "topic/partition" (stream) and position the row within the task or the Kafka offset. The
step number lets a reader drop what a crashed run did after its last checkpoint. Lines are flushed
per step so a SIGKILL loses at most the step in flight.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from airflow_provider_primus.data.tensors import TensorBatch


def step_rows(parts: Sequence[tuple[str, TensorBatch]], passthrough: Sequence[str] = ()) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for name, batch in parts:
        positions = batch.positions.tolist() if batch.positions is not None else [None] * len(batch)
        extras = [batch.extra[c].tolist() for c in passthrough if c in batch.extra]
        origins = batch.row_origins().tolist()
        for i, pos in enumerate(positions):
            rows.append([name, origins[i], pos, *(e[i] for e in extras)])
    return rows


class TraceWriter:
    def __init__(self, path: Path, passthrough: Sequence[str] = ()) -> None:
        self.passthrough = tuple(passthrough)
        # Which writer (a trainer process's run) wrote a line: a restarted trainer appends to the same
        # file, and its first step may follow the last one of its predecessor (a checkpoint at the
        # very step it was killed at), so the steps alone cannot show where one run ends.
        self.run = uuid.uuid4().hex[:12]
        # "-" is stdout, so a supervisor can follow the steps as events instead of polling a file.
        self._stdout = str(path) == "-"
        self._file: IO[str] = sys.stdout if self._stdout else open(path, "a", encoding="utf-8")  # noqa: SIM115

    def __call__(self, step: int, parts: list[tuple[str, TensorBatch]]) -> None:
        # ``t`` (wall clock) dates each step for fault analyses: when did the stream train again.
        entry = {
            "step": step,
            "t": round(time.time(), 3),
            "run": self.run,
            "rows": step_rows(parts, self.passthrough),
        }
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._stdout:
            self._file.close()
