"""A trainer of several sources without a job (``primus train``): one feed per files source (each with
its own data service) and one stream feed per Kafka source, mixed by weight and priority; stopped
at a checkpoint and resumed, every row of every source is trained once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.training.feeds.feed import FileFeed, StreamFeed
from airflow_provider_primus.training.feeds.setup import participants
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import SCHEMA, T0, World, events, history_source, rows_by_source, to_json

WEIGHTS = {"history": 0.4, "recent": 0.3, "views": 0.2, "events": 0.1}


def several(world: World, new_topic: Any) -> dict[str, set[int]]:
    """The world's data with a second files source (``recent``) and a second topic (``views``);
    returns every source's row ids."""
    root = world.root
    t = T0
    part = root / "recent" / t.strftime("%Y-%m-%d") / t.strftime("%H")
    part.mkdir(parents=True)
    pq.write_table(events(100_000, 1500, t, seed=21), part / "part-0.parquet", row_group_size=500)
    views = new_topic("views")
    produce(world.bootstrap, views, to_json(events(300_000, 700, T0, seed=22)))
    clicks = world.produce_events(900, seed=23)
    data: dict[str, Any] = yaml.safe_load(world.spec_path.read_text())
    data["spec"]["window"]["end"] = (T0 + timedelta(hours=1)).isoformat()  # history: rows 0..4999
    data["spec"]["ordered"] = False
    events_source = data["spec"]["sources"][1]
    data["spec"]["sources"] = [
        history_source(root),
        events_source,
        {**history_source(root), "name": "recent", "uri": f"file://{root}/recent"},
        {**events_source, "name": "views", "topic": views, "group_id": f"{views}-trainer", "schema": SCHEMA},
    ]
    data["spec"]["mixture"] = [
        {"source": name, "weight": w, "priority": p}
        for (name, w), p in zip(WEIGHTS.items(), (0, 1, 2, 0), strict=True)
    ]
    world.spec_path.write_text(yaml.safe_dump(data))
    return {
        "history": set(range(5000)),
        "recent": set(range(100_000, 101_500)),
        "views": set(range(300_000, 300_700)),
        "events": set(clicks),
    }


def train(
    world: World, tmp_path: Path, **options: Any
) -> tuple[Trainer, dict[str, Any], list[dict[str, list[int]]]]:
    data = load_data_spec(world.spec_path)
    training = load_training_spec(
        world.training(
            tmp_path / "training.yaml",
            mode="mixed",
            batch_size=200,
            checkpoint={"every_steps": 10, "every_s": 0},
            publish={"every_s": 0},
            # The guard off (the data is old by the wall clock): steps are split by weight alone.
            mixing={
                "shuffle": {"buffer_rows": 0},
                "freshness": {
                    "source": "views",
                    "clock": "wall",
                    "max_lag_records": None,
                    "max_event_age_s": None,
                },
            },
        )
    )
    steps: list[dict[str, list[int]]] = []
    trace = rows_by_source(steps)
    trainer = Trainer(
        data,
        training,
        TrainOptions(workdir=tmp_path / "work", trace=trace, passthrough=("row_id",), **options),
    )
    return trainer, trainer.run(), steps


def test_every_source_has_its_feed_and_every_row_is_trained_once_through_a_resume(
    world: World, tmp_path: Path, new_topic: Any
) -> None:
    want = several(world, new_topic)
    assert participants(load_data_spec(world.spec_path), "stream") == ["events", "views"]
    first, _, before = train(world, tmp_path, max_steps=20)  # stops at its checkpoint of step 20
    assert {n: type(f) for n, f in first.feeds.items()} == {
        "history": FileFeed,
        "events": StreamFeed,
        "recent": FileFeed,
        "views": StreamFeed,
    }
    # While every source has rows (views' 700 last 17 steps), each gets exactly its weight's share
    # of every step (the streams' rows come by offsets, so this does not depend on timing); then the
    # others share its part by their weights.
    shares = {n: round(200 * w) for n, w in WEIGHTS.items()}
    assert [{n: len(r) for n, r in step.items()} for step in before[:17]] == [shares] * 17
    assert all(sum(len(r) for r in step.values()) == 200 for step in before)
    _, result, after = train(world, tmp_path)
    trained: dict[str, list[int]] = {}
    for step in before + after:
        for name, rows in step.items():
            trained.setdefault(name, []).extend(rows)
    for name, rows in trained.items():
        assert not [r for r, n in Counter(rows).items() if n > 1], f"{name}: rows trained twice"
    assert {n: set(r) for n, r in trained.items()} == want
    assert result["rows_trained"] == {n: len(r) for n, r in want.items()}
