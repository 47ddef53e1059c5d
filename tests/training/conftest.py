"""A small hybrid world for runtime tests: hourly Parquet history and a Kafka topic of JSON events.

Labels depend on the IDs (a learnable signal); every row carries ``row_id`` so a test can account
for each sample. Stream events get row ids after the history's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from kafka import KafkaConsumer

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka import ensure_topic, produce
from airflow_provider_primus.embedded.kafka import EmbeddedKafka, ensure_distribution
from airflow_provider_primus.embedded.kafka.broker import free_port

T0 = datetime(2026, 5, 1, tzinfo=UTC)
SCHEMA = {
    "sparse": ["user_id", "item_id"],
    "dense": ["price"],
    "label": {"column": "clicked"},
    "event_time": "ts",
    "transforms": [{"column": "user_id", "hash_bucket": 1009}, {"column": "item_id", "hash_bucket": 503}],
}


def history_source(root: Path, **extra: Any) -> dict[str, Any]:
    """The hourly Parquet source under ``root/store`` the test worlds write."""
    return {
        "name": "history",
        "type": "files",
        "format": "parquet",
        "uri": f"file://{root}/store",
        "path_template": "{date}/{hour}",
        "granularity": "hour",
        **extra,
        "schema": SCHEMA,
    }


def events(first_id: int, rows: int, start: datetime, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 1000, rows)
    items = rng.integers(0, 500, rows)
    p = 1 / (1 + np.exp(-(((users % 7) - 3) + ((items % 5) - 2))))
    seconds = np.sort(rng.integers(0, 3600, rows))
    return pa.table(
        {
            "row_id": np.arange(first_id, first_id + rows, dtype=np.int64),
            "user_id": users,
            "item_id": items,
            "price": rng.random(rows),
            "clicked": (rng.random(rows) < p).astype(np.int64),
            "ts": pa.array(
                [start + timedelta(seconds=int(s)) for s in seconds], pa.timestamp("us", tz="UTC")
            ),
        }
    )


def to_json(table: pa.Table) -> list[bytes]:
    out = []
    for row in table.to_pylist():
        row["ts"] = row["ts"].isoformat()
        out.append(json.dumps(row).encode())
    return out


def kafka_source(
    bootstrap: str, topic: str, *, schema: dict[str, Any] | None = None, **fields: Any
) -> KafkaSource:
    """The ``events`` source on ``topic``: the test worlds' schema (overridable) and any other field."""
    return KafkaSource.model_validate(
        {
            "name": "events",
            "type": "kafka",
            "bootstrap_servers": bootstrap,
            "topic": topic,
            "event_time_field": "ts",
            "start": {"policy": "earliest"},
            **fields,
            "schema": {**SCHEMA, **(schema or {})},
        }
    )


@dataclass
class World:
    root: Path
    bootstrap: str
    topic: str
    history_rows: int
    next_id: int
    spec_path: Path

    def produce(self, messages: list[bytes]) -> None:
        produce(self.bootstrap, self.topic, messages)

    def produce_events(self, rows: int, seed: int, hour: int = 4) -> list[int]:
        table = events(self.next_id, rows, T0 + timedelta(hours=hour), seed)
        self.next_id += rows
        self.produce(to_json(table))
        ids: list[int] = table.column("row_id").to_pylist()
        return ids

    def training(self, path: Path, **spec: Any) -> Path:
        # The model protocol (type python) is v1beta1's; the rest stays at v1alpha1, which still runs.
        python = (spec.get("model") or {}).get("type") == "python"
        doc = {
            "apiVersion": f"primus.dev/{'v1beta1' if python else 'v1alpha1'}",
            "kind": "PrimusTraining",
            "metadata": {"name": "t"},
            "spec": spec,
        }
        path.write_text(yaml.safe_dump(doc))
        return path


@pytest.fixture
def world(tmp_path: Path, kafka_broker: Any, new_topic: Callable[..., str]) -> World:
    topic = new_topic("clicks")
    hours, per_file = 4, 5000
    for h in range(hours):
        t = T0 + timedelta(hours=h)
        part = tmp_path / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        pq.write_table(
            events(h * per_file, per_file, t, seed=h), part / "part-0.parquet", row_group_size=1000
        )
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "hybrid"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=hours)).isoformat()},
            "ordered": True,
            "planning": {"target_rows_per_task": 2000, "min_rows_per_task": 1000},
            "sources": [
                history_source(tmp_path),
                {
                    "name": "events",
                    "type": "kafka",
                    "bootstrap_servers": kafka_broker.bootstrap_servers,
                    "topic": topic,
                    "event_time_field": "ts",
                    "start": {"policy": "earliest"},
                    "group_id": f"{topic}-trainer",
                    "schema": SCHEMA,
                },
            ],
            "mixture": [
                {"source": "history", "weight": 0.75, "priority": 0},
                {"source": "events", "weight": 0.25, "priority": 1},
            ],
        },
    }
    spec_path = tmp_path / "data.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    return World(
        tmp_path, kafka_broker.bootstrap_servers, topic, hours * per_file, hours * per_file, spec_path
    )


def id_batch(tables: list[int], n: int, seed: int, num_dense: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded model input: one in-range ID per table per row, standard-normal dense values."""
    g = torch.Generator().manual_seed(seed)
    sparse = torch.stack([torch.randint(0, t, (n,), generator=g) for t in tables], dim=1)
    return sparse, torch.randn(n, num_dense, generator=g)


def rows_by_source(steps: list[dict[str, list[int]]]) -> Callable[[int, list[tuple[str, Any]]], None]:
    """A trainer's ``trace`` hook appending, per step, the ``row_id``s each source gave it."""

    def trace(_step: int, parts: list[tuple[str, Any]]) -> None:
        rows: dict[str, list[int]] = {}
        for source, batch in parts:
            rows.setdefault(source, []).extend(int(x) for x in batch.extra["row_id"])
        steps.append(rows)

    return trace


@pytest.fixture
def one_thread() -> Iterator[None]:
    """For tests of tiny tensors: they gain nothing from intra-op threads, and on a busy two-core
    runner each parallel region can stall for a scheduler slice waiting on its second thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def letters_on(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Every dead letter on ``topic`` (exactly ``expected`` of them), read from the start."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    try:
        letters = list(consumer)
    finally:
        consumer.close()
    assert len(letters) == expected, [dict(m.headers)["primus.error"] for m in letters[:5]]
    return letters


class OwnBroker:
    """A broker of the test's own, stopped and started again on the same port and data: what an
    outage looks like to its clients (the session's broker is shared, and stays up)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self._kafka: EmbeddedKafka | None = None

    def start(self) -> None:
        # Tagged with the session's instance: a broker a failed test leaves is found as a leak.
        self._kafka = EmbeddedKafka(
            ensure_distribution(), self.workdir, port=self.port, instance=f"pytest-{os.getpid()}"
        )
        self._kafka.start()

    def stop(self) -> None:
        if self._kafka is not None:
            self._kafka.stop()
            self._kafka = None

    def topic(self, name: str, messages: list[bytes]) -> None:
        ensure_topic(self.bootstrap_servers, name)
        produce(self.bootstrap_servers, name, messages)


@contextlib.contextmanager
def own_broker(workdir: Path) -> Iterator[OwnBroker]:
    """A broker of the test's own under ``workdir``, not started yet (the test starts and stops it
    when its story needs); stopped on the way out."""
    broker = OwnBroker(workdir)
    try:
        yield broker
    finally:
        broker.stop()
