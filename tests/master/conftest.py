"""A files-only world for job tests: hourly Parquet history with a ``row_id`` on every row, a data
document, a batch training document and a job document whose fields a test can override."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.master.store import SqliteJobStore
from tests.training.conftest import SCHEMA, T0, events, history_source


@dataclass
class JobWorld:
    root: Path
    rows: int
    data_path: Path
    training_path: Path
    store: SqliteJobStore
    home: Path

    def job(self, name: str = "job", **spec: Any) -> Path:
        doc = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": name},
            "spec": {
                "data": str(self.data_path),
                "training": str(self.training_path),
                "passthrough": ["row_id"],
                "roles": {
                    "data": {"resources": {"cpu": 1, "memory": "1Gi"}},
                    "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
                },
                "scaling": {"enabled": False},
                **spec,
            },
        }
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def trace_rows(self, name: str = "job") -> list[int]:
        return trace_rows(self.home / "jobs" / name / "trace.jsonl")

    def add_stream(
        self, bootstrap_servers: str, topic: str, weights: tuple[float, float], priority: int
    ) -> dict[str, Any]:
        """Make the job mixed: the topic as a second source ``events`` (read from the earliest
        offset, ``priority`` against the history's 0), mixed ``weights`` (history, events). Returns
        the data document, written back, for further changes."""
        data: dict[str, Any] = yaml.safe_load(self.data_path.read_text())
        data["spec"]["sources"].append(
            {
                "name": "events",
                "type": "kafka",
                "bootstrap_servers": bootstrap_servers,
                "topic": topic,
                "event_time_field": "ts",
                "start": {"policy": "earliest"},
                "group_id": f"{topic}-trainer",
                "schema": SCHEMA,
            }
        )
        data["spec"]["mixture"] = [
            {"source": "history", "weight": weights[0], "priority": 0},
            {"source": "events", "weight": weights[1], "priority": priority},
        ]
        self.data_path.write_text(yaml.safe_dump(data))
        training = yaml.safe_load(self.training_path.read_text())
        training["spec"]["mode"] = "mixed"
        self.training_path.write_text(yaml.safe_dump(training))
        return data


def trace_rows(path: Path) -> list[int]:
    """Every row a job's model holds, in training order, from the trainer's trace (``path``). A
    restarted trainer resumes at its checkpoint and re-trains the steps after it: the last record of
    each step is the one the model kept."""
    steps: dict[int, list[int]] = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the torn last line of a killed trainer
        steps[entry["step"]] = [row[3] for row in entry["rows"]]
    return [r for step in sorted(steps) for r in steps[step]]


def write_world(
    root: Path, hours: int = 4, per_file: int = 5000, first_hour: int = 0, *, success_marker: bool = False
) -> None:
    """Hourly partitions ``store/YYYY-MM-DD/HH`` of ``per_file`` rows; row ids run on across hours."""
    for h in range(first_hour, first_hour + hours):
        t = T0 + timedelta(hours=h)
        part = root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        pq.write_table(
            events(h * per_file, per_file, t, seed=h), part / "part-0.parquet", row_group_size=1000
        )
        if success_marker:
            (part / "_SUCCESS").touch()


@pytest.fixture
def job_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobWorld]:
    hours, per_file = 4, 5000
    write_world(tmp_path, hours, per_file)
    data = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "history"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()},
            "planning": {"target_rows_per_task": 2000, "min_rows_per_task": 1000},
            "sources": [history_source(tmp_path)],
        },
    }
    data_path = tmp_path / "data.yaml"
    data_path.write_text(yaml.safe_dump(data))
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        # Small steps: a pass is a thousand of them, so a test can act between any two. No shuffle
        # buffer: it would take this small pass into the trainer at once, and the tests act while
        # the data executors still serve it.
        "spec": {
            "mode": "batch",
            "batch_size": 20,
            "checkpoint": {"every_steps": 50, "every_s": 0.0},
            "mixing": {"shuffle": {"buffer_rows": 0}},
        },
    }
    training_path = tmp_path / "training.yaml"
    training_path.write_text(yaml.safe_dump(training))
    home = tmp_path / "home"
    monkeypatch.setenv("PRIMUS_HOME", str(home))
    store = SqliteJobStore(home / "jobs.sqlite")
    try:
        yield JobWorld(tmp_path, hours * per_file, data_path, training_path, store, home)
    finally:
        _stop_everything(store)


def _stop_everything(store: SqliteJobStore) -> None:
    """Whatever a test left running (a master it killed, executors that outlived it) is ended here."""
    for record in store.find():
        pids = [(record.status.get("master") or {}).get("pid")]
        pids += [e["handle"]["ref"].get("pid") for e in (record.status.get("executors") or {}).values()]
        for pid in pids:
            if not pid or pid == os.getpid():
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)
                os.killpg(pid, signal.SIGKILL)


def trace_rows_of_group(home: Path, name: str = "job") -> list[int]:
    """Every row the model of a job with several trainers (or a changing count) holds: each
    trainer's trace (``trace.jsonl`` of a lone trainer, ``trace.jsonl.rank{r}`` of a group) read as
    ``JobWorld.trace_rows`` reads one, the last record of each step being the one the model kept."""
    rows: list[int] = []
    for path in sorted((home / "jobs" / name).glob("trace.jsonl*")):
        steps: dict[int, list[int]] = {}
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # the torn last line of a killed trainer
            steps[entry["step"]] = [row[3] for row in entry["rows"]]
        rows += [r for step in sorted(steps) for r in steps[step]]
    return rows
