"""History replay: a share of each step drawn again from windows the primary pass has finished.

Sampled from the task graph, task by task: a task of an eligible window is chosen at random, read
whole in the trainer (one task at a time, so memory stays bounded by the largest task), and its rows
handed out in a random order. Nothing goes through the data service: the dispatcher's leases and
acknowledgements account for the primary pass alone, so replay can never make a row count as
consumed twice, or not at all.

The feed's state is the generator's state before the current task was drawn, the task and how many
of its rows were handed out: a resumed run reads that task again, draws the same order, and carries
on exactly where the checkpoint was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from airflow_provider_primus.contracts.data import HistorySource
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.reader import READ_ROWS, read_task
from airflow_provider_primus.data.sources.history import history_filesystem, read_fields
from airflow_provider_primus.data.tensors import TensorBatch, concat_batches, to_tensors
from airflow_provider_primus.data.transforms import BatchTransformer

__all__ = ["REPLAY_SUFFIX", "ReplayFeed", "is_replay", "replayed_source"]

# A feed name no source can have (source names are DNS-label-like): "<source>:replay".
REPLAY_SUFFIX = ":replay"


def is_replay(name: str) -> bool:
    return name.endswith(REPLAY_SUFFIX)


def replayed_source(name: str) -> str:
    """The files source a replay feed draws from (the name itself for any other feed)."""
    return name[: -len(REPLAY_SUFFIX)] if is_replay(name) else name


class ReplayFeed:
    """The replay of ``source`` as a feed. ``position()`` says which window the primary pass is in
    (None before its first rows) and ``finished()`` whether it is done; ``primaries()`` whether any
    feed it accompanies still has data to come (replay alone never keeps training going)."""

    stream = False

    def __init__(
        self,
        source: HistorySource,
        tasks: Sequence[Task],
        *,
        position: Callable[[], str | None],
        finished: Callable[[], bool],
        primaries: Callable[[], bool],
        windows: int,
        seed: int,
        sparse: Sequence[str],
        dense: Sequence[str],
        passthrough: Sequence[str] = (),
        state: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = source.name + REPLAY_SUFFIX
        self.source = source
        self.tasks = sorted(tasks, key=lambda t: (t.group, t.task_id))
        self._by_id = {t.task_id: t for t in self.tasks}
        self._position, self._finished, self._primaries = position, finished, primaries
        self.windows = windows
        self.columns = (list(sparse), list(dense), list(passthrough))
        self._transformer = BatchTransformer(source.schema_, passthrough=passthrough)
        self._rng = np.random.Generator(np.random.PCG64([seed, 0x5E91A7]))
        self._rows: TensorBatch | None = None  # the current task's rows, in drawing order
        self._task: str | None = None
        self._cursor = 0
        self._drawn_from: Mapping[str, Any] = self._rng.bit_generator.state
        if state and state.get("task") is not None:
            self._rng.bit_generator.state = state["rng"]
            self._load(self._pick_task(state["task"]))
            self._cursor = int(state["cursor"])
        elif state:
            self._rng.bit_generator.state = state["rng"]

    def eligible(self) -> list[Task]:
        """Tasks of the windows the primary pass has finished, the last ``windows`` of them."""
        if self._finished():
            done = sorted({t.group for t in self.tasks})
        else:
            current = self._position()
            done = sorted({t.group for t in self.tasks if current is not None and t.group < current})
        if self.windows:
            done = done[-self.windows :]
        keep = set(done)
        return [t for t in self.tasks if t.group in keep and (t.rows is None or t.rows > 0)]

    def available(self, want: int) -> int:
        if self._remaining() == 0:
            eligible = self.eligible()
            if not eligible:
                return 0
            task = eligible[int(self._rng.integers(len(eligible)))]
            self._drawn_from = self._rng.bit_generator.state
            self._load(task)
        return self._remaining()

    def _remaining(self) -> int:
        return 0 if self._rows is None else len(self._rows) - self._cursor

    def _pick_task(self, task_id: str) -> Task:
        task = self._by_id.get(task_id)
        if task is None:
            raise ValueError(f"checkpointed replay task {task_id} is not in the task graph")
        return task

    def _load(self, task: Task) -> None:
        sparse, dense, passthrough = self.columns
        fs, _ = history_filesystem(self.source)
        parts = []
        for batch in read_task(
            task,
            fmt=self.source.format,
            columns=self._transformer.input_columns(),
            batch_rows=READ_ROWS,
            filesystem=fs,
            fields=read_fields(self.source),
        ):
            out = self._transformer.transform(batch, task.slices[0].path if task.slices else task.task_id)
            parts.append(to_tensors(out.batch, sparse=sparse, dense=dense, extra=passthrough))
        rows = concat_batches(parts) if parts else None
        self._task, self._cursor = task.task_id, 0
        if rows is None or not len(rows):
            self._rows = None
            return
        rows.origin, rows.window = task.task_id, task.group
        rows.positions = np.arange(len(rows), dtype=np.int64)
        self._rows = rows.rows(self._rng.permutation(len(rows)).astype(np.int64))

    def take(self, rows: int) -> list[TensorBatch]:
        if self._rows is None or rows <= 0:
            return []
        stop = min(len(self._rows), self._cursor + rows)
        out = self._rows.slice(self._cursor, stop)
        self._cursor = stop
        return [out] if len(out) else []

    def exhausted(self) -> bool:
        return not self._primaries()

    def state(self) -> dict[str, Any]:
        # The generator's state from before the current task's rows were ordered: a resume reads
        # the task again and orders them the same way.
        if self._task is None:
            return {"rng": self._rng.bit_generator.state, "task": None, "cursor": 0}
        return {"rng": self._drawn_from, "task": self._task, "cursor": self._cursor}

    def close(self) -> None:
        self._rows = None
