"""A multi-hot column end to end through the trainer: Parquet lists through the data service and
JSON arrays through the stream, trained by the built-in DLRM with shuffled history, checkpointed
and resumed exactly, published and served; and a ``python`` model given the bags."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.training.checkpoints.served import served_model
from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from airflow_provider_primus.training.user_model import UserModel
from tests.training.conftest import SCHEMA, T0, events, history_source, produce, rows_by_source, to_json
from tests.training.test_entrypoint import EXAMPLE

TESTS = Path(__file__).resolve().parents[2]
HOURS, PER_FILE = 2, 3000
LIST_SCHEMA = {
    **SCHEMA,
    "multi_hot": [{"column": "recent", "pooling": "mean", "max_length": 8}],
    "transforms": [*SCHEMA["transforms"], {"column": "recent", "hash_bucket": 211}],
}


def with_lists(table: pa.Table, seed: int) -> pa.Table:
    """``recent``: 0..12 item IDs a row near its own item (a signal), a few null lists and IDs."""
    rng = np.random.default_rng(seed)
    items = table.column("item_id").to_numpy()
    lengths = rng.integers(0, 13, table.num_rows)
    recent: list[Any] = [
        [None if rng.random() < 0.03 else int(items[i] + k) for k in range(n)] for i, n in enumerate(lengths)
    ]
    for i in range(0, table.num_rows, 23):
        recent[i] = None
    return table.append_column("recent", pa.array(recent, type=pa.list_(pa.int64())))


@dataclass
class ListWorld:
    root: Path
    spec_path: Path
    topic: str | None

    def training(self, path: Path, **spec: Any) -> Path:
        python = (spec.get("model") or {}).get("type") == "python"
        doc = {
            "apiVersion": f"primus.dev/{'v1beta1' if python else 'v1alpha1'}",
            "kind": "PrimusTraining",
            "metadata": {"name": "t"},
            "spec": spec,
        }
        path.write_text(yaml.safe_dump(doc))
        return path


def list_world(root: Path, kafka: tuple[str, str] | None = None) -> ListWorld:
    for h in range(HOURS):
        t = T0 + timedelta(hours=h)
        part = root / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        table = with_lists(events(h * PER_FILE, PER_FILE, t, seed=h), seed=h)
        pq.write_table(table, part / "part-0.parquet", row_group_size=1000)
    sources: list[dict[str, Any]] = [{**history_source(root), "schema": LIST_SCHEMA}]
    if kafka is not None:
        bootstrap, topic = kafka
        sources.append(
            {
                "name": "events",
                "type": "kafka",
                "bootstrap_servers": bootstrap,
                "topic": topic,
                "event_time_field": "ts",
                "start": {"policy": "earliest"},
                "group_id": f"{topic}-trainer",
                "schema": LIST_SCHEMA,
            }
        )
        stream = with_lists(events(10**6, 1000, T0 + timedelta(hours=HOURS), seed=9), seed=9)
        messages = []
        for value, recent in zip(
            to_json(stream.drop_columns(["recent"])), stream.column("recent").to_pylist(), strict=True
        ):
            row = json.loads(value)
            row["recent"] = recent
            messages.append(json.dumps(row).encode())
        produce(bootstrap, topic, messages)
    doc = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "lists"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=HOURS)).isoformat()},
            "ordered": True,
            "planning": {"target_rows_per_task": 1500, "min_rows_per_task": 500},
            "sources": sources,
        },
    }
    spec_path = root / "data.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    return ListWorld(root, spec_path, kafka[1] if kafka else None)


def sample(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Bag]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack(
        [torch.randint(0, 1009, (n,), generator=g), torch.randint(0, 503, (n,), generator=g)], 1
    )
    lengths = torch.randint(0, 9, (n,), generator=g)
    recent = Bag(
        torch.randint(0, 211, (int(lengths.sum()),), generator=g), torch.cumsum(lengths, 0) - lengths
    )
    return ids, torch.rand(n, 1, generator=g), {"recent": recent}


def test_a_list_column_trains_checkpoints_resumes_exactly_and_is_served(tmp_path: Path) -> None:
    world = list_world(tmp_path)
    data = load_data_spec(world.spec_path)
    training = load_training_spec(
        world.training(
            tmp_path / "t.yaml",
            mode="batch",
            batch_size=256,
            seed=4,
            mixing={"shuffle": {"buffer_rows": 1200}},  # the pool (and its bags) is checkpointed
            checkpoint={"every_steps": 5, "every_s": 0},
            publish={"every_s": 0},
        )
    )

    def run(
        workdir: Path, max_steps: int | None = None
    ) -> tuple[list[dict[str, list[int]]], Trainer, dict[str, Any]]:
        steps: list[dict[str, list[int]]] = []
        options = TrainOptions(
            workdir=workdir, max_steps=max_steps, passthrough=("row_id",), trace=rows_by_source(steps)
        )
        trainer = Trainer(data, training, options)
        return steps, trainer, trainer.run()

    reference, trainer, result = run(tmp_path / "whole")
    assert isinstance(trainer.model, DLRM) and trainer.model.bag_columns == ("recent",)
    assert result["rows_trained"] == {"history": HOURS * PER_FILE}
    expected = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()

    first, crashed, _ = run(tmp_path / "crashing", max_steps=7)
    crashed.close()
    rest, resumed, _ = run(tmp_path / "crashing")  # from the checkpoint at step 7
    assert first + rest == reference
    state = resumed.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in expected.items())
    resumed.close()

    snapshot = latest_snapshot(tmp_path / "whole" / "model")
    assert snapshot is not None
    assert snapshot.manifest["model"]["multi_hot"] == [
        {"column": "recent", "num_embeddings": 211, "pooling": "mean"}
    ]
    served = served_model(snapshot)
    ids, prices, bags = sample(64, seed=5)
    with torch.no_grad():
        assert torch.equal(served(ids, prices, bags), trainer.model.eval()(ids, prices, bags))


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", ":".join([str(EXAMPLE), str(TESTS), *sys.path]))


@pytest.mark.usefixtures("on_path")
def test_a_python_model_is_given_the_bags_from_files_and_the_stream(
    tmp_path: Path, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    world = list_world(tmp_path, (kafka_broker.bootstrap_servers, new_topic("lists")))
    data = load_data_spec(world.spec_path)
    model = {"type": "python", "entrypoint": "two_tower:build", "options": {"tower": [16, 8], "seed": 3}}
    training = load_training_spec(
        world.training(tmp_path / "t.yaml", mode="mixed", batch_size=256, model=model)
    )
    trainer = Trainer(data, training, TrainOptions(workdir=tmp_path / "w"))
    assert isinstance(trainer.model, UserModel)
    [recent] = trainer.model.schema.multi_hot
    assert (recent.name, recent.num_embeddings, recent.pooling, recent.max_length) == (
        "recent",
        211,
        "mean",
        8,
    )
    item_tower = trainer.model.user.item
    assert ("recent", True, -1) in item_tower.columns  # the example pools it in the item tower
    before = item_tower.tables[1].weight.detach().clone()
    result = trainer.run()
    assert result["rows_trained"] == {"history": HOURS * PER_FILE, "events": 1000}
    assert not torch.equal(item_tower.tables[1].weight, before)  # the list's table trained
    snapshot = latest_snapshot(tmp_path / "w" / "model")
    assert snapshot is not None
    assert snapshot.manifest["model"]["schema"]["sparse"][2]["multi_hot"] is True
    served = served_model(snapshot)
    ids, prices, bags = sample(32, seed=6)
    with torch.no_grad():
        assert torch.equal(served(ids, prices, bags), trainer.model.eval()(ids, prices, bags))
    trainer.close()
