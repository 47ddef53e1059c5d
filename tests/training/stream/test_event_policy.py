"""Event times from the future (and from 1970) on the real broker: a stream's ``event_time_policy``.

Events stamped decades ahead used to be trained like any other and moved the watermark (the newest
event time trained) to 2096 for the rest of the job, checkpoints included. Now:

- by default each such event is dead-lettered with the reason and never trained, the good ones
  around it are, and the watermark is the newest *good* event time;
- under ``action: clamp`` every event is trained with its time moved to the nearest bound;
- a checkpoint whose watermark lies far ahead (written before the policy existed, or under a wider
  one) is resumed with the watermark at most ``max_ahead_s`` ahead of now.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from airflow_provider_primus.training.stream.event_policy import sane_watermark
from airflow_provider_primus.training.stream.source import StreamSource
from tests.training.conftest import T0, World, events, kafka_source, letters_on, produce, to_json

BAD_ID = 100_000  # row ids of out-of-policy events: none of them may be trained
HOUR_MS = 3_600_000
FUTURE = datetime(2096, 3, 1, tzinfo=UTC)
PAST = datetime(1970, 1, 2, tzinfo=UTC)


def wall_ms() -> int:
    return int(time.time() * 1000)


def mixed_messages(good: list[bytes]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """``good`` with 150 events of 2096 and 150 of 1970 spread between them (every fetched block
    mixes them), and three messages that are not JSON (the per-message decode path too): the
    messages, the future ones and the past ones."""
    future = to_json(events(BAD_ID, 150, FUTURE, seed=50))
    past = to_json(events(BAD_ID + 150, 150, PAST, seed=51))
    messages = good[:60]
    rest = iter(good[60:])
    for i, (f, p) in enumerate(zip(future, past, strict=True)):
        messages += [f, *([b"{not json"] if i % 50 == 0 else []), next(rest), p]
    messages += list(rest)
    return messages, future, past


def drain(src: StreamSource, timeout_s: float = 60.0) -> tuple[list[int], list[int]]:
    """Row ids and event times (ms) of everything a bounded source serves."""
    ids: list[int] = []
    times: list[int] = []
    deadline = time.monotonic() + timeout_s
    while not src.exhausted():
        assert time.monotonic() < deadline, f"stream stalled after {len(ids)} rows"
        src.fill(1000, timeout_s=1.0)
        for batch in src.take(1000):
            ids += [int(x) for x in batch.extra["row_id"]]
            times += batch.event_times().tolist()
    return ids, times


def test_future_and_1970_events_are_dead_lettered_with_the_reason(kafka_broker: Any, new_topic: Any) -> None:
    topic = new_topic("future")
    bootstrap = kafka_broker.bootstrap_servers
    good_table = events(0, 300, T0 + timedelta(hours=4), seed=1)
    messages, future, past = mixed_messages(to_json(good_table))
    not_json = messages.count(b"{not json")
    assert not_json == 3
    produce(bootstrap, topic, messages)

    src = StreamSource(kafka_source(bootstrap, topic), passthrough=("row_id",), bounded=True)
    try:
        trained, times = drain(src)
        src.flush()
        assert src.checkpoint_state()["dead_lettered"] == 300 + not_json  # the malformed messages' count
    finally:
        src.close()
    assert Counter(trained) == Counter(range(300))  # every good event once, none of the others
    good_ms = good_table.column("ts").cast("int64").to_numpy() // 1000
    assert max(times) == int(good_ms.max())  # what the watermark is made of: the good events only
    assert max(times) <= wall_ms() + HOUR_MS

    letters = letters_on(bootstrap, f"{topic}.dlq", expected=300 + not_json)
    reasons = {m.value: dict(m.headers)["primus.error"].decode() for m in letters}
    for value in future:
        assert reasons[value].startswith("event time 2096-03-01T"), reasons[value]
        assert "more than event_time_policy.max_ahead_s (3600 s) ahead of now" in reasons[value]
    for value in past:
        assert reasons[value].startswith("event time 1970-01-02T"), reasons[value]
        assert "before event_time_policy.min_event_time (2000-01-01T00:00:00+00:00)" in reasons[value]


def test_clamp_trains_every_event_with_its_time_at_the_nearest_bound(
    kafka_broker: Any, new_topic: Any
) -> None:
    topic = new_topic("clamp")
    bootstrap = kafka_broker.bootstrap_servers
    messages, _, _ = mixed_messages(to_json(events(0, 300, T0 + timedelta(hours=4), seed=2)))
    produce(bootstrap, topic, messages)
    source = kafka_source(
        bootstrap,
        topic,
        event_time_policy={"action": "clamp", "max_ahead_s": 600, "min_event_time": "2010-01-01T00:00:00Z"},
    )
    started = wall_ms()
    src = StreamSource(source, passthrough=("row_id",), bounded=True)
    try:
        trained, times = drain(src)
        assert src.event_times_clamped == 300
    finally:
        src.close()
    assert Counter(trained) == Counter([*range(300), *range(BAD_ID, BAD_ID + 300)])
    by_id = dict(zip(trained, times, strict=True))
    floor = int(datetime(2010, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert {by_id[i] for i in range(BAD_ID + 150, BAD_ID + 300)} == {floor}  # 1970 -> the floor
    ahead = np.asarray([by_id[i] for i in range(BAD_ID, BAD_ID + 150)])
    assert (ahead >= started + 600_000).all() and (ahead <= wall_ms() + 600_000).all()  # 2096 -> now + 10 min


def stream_training(world: World, path: Path) -> Any:
    return load_training_spec(
        world.training(
            path,
            mode="stream",
            batch_size=128,
            checkpoint={"every_steps": 2, "every_s": 0},
            publish={"every_s": 0},
        )
    )


def test_the_trained_watermark_only_moves_with_accepted_events(world: World, tmp_path: Path) -> None:
    good = events(world.next_id, 500, T0 + timedelta(hours=5), seed=3)
    messages, _, _ = mixed_messages(to_json(good))
    world.produce(messages)
    trained: list[int] = []
    options = TrainOptions(
        workdir=tmp_path / "w",
        passthrough=("row_id",),
        trace=lambda _s, parts: trained.extend(int(x) for _, b in parts for x in b.extra["row_id"]),
    )
    result = Trainer(
        load_data_spec(world.spec_path), stream_training(world, tmp_path / "t.yaml"), options
    ).run()
    assert sorted(trained) == good.column("row_id").to_pylist()
    assert result["rows_trained"] == {"events": 500}
    assert result["dead_lettered"] == 300 + messages.count(b"{not json")
    newest = datetime.fromisoformat(result["watermark"])
    assert newest == max(good.column("ts").to_pylist())  # not 2096


def test_a_far_future_checkpointed_watermark_is_clamped_on_resume(world: World, tmp_path: Path) -> None:
    """A checkpoint trained under a year's allowance on events 200 days ahead holds the watermark a
    pre-policy checkpoint would; resumed under the default hour, the watermark is at most an hour ahead."""
    doc = yaml.safe_load(world.spec_path.read_text())
    doc["spec"]["sources"][1]["event_time_policy"] = {"max_ahead_s": 366 * 86_400}
    world.spec_path.write_text(yaml.safe_dump(doc))
    ahead = datetime.now(UTC) + timedelta(days=200)
    world.produce(to_json(events(world.next_id, 400, ahead, seed=4)))
    training = stream_training(world, tmp_path / "t.yaml")
    workdir = tmp_path / "w"
    first = Trainer(load_data_spec(world.spec_path), training, TrainOptions(workdir=workdir)).run()
    assert datetime.fromisoformat(first["watermark"]) >= ahead  # the poisoned checkpoint

    del doc["spec"]["sources"][1]["event_time_policy"]  # the default: an hour ahead at most
    world.spec_path.write_text(yaml.safe_dump(doc))
    resumed = Trainer(load_data_spec(world.spec_path), training, TrainOptions(workdir=workdir)).run()
    assert resumed["steps"] == first["steps"]  # resumed: nothing new to train
    watermark_ms = datetime.fromisoformat(resumed["watermark"]).timestamp() * 1000
    assert watermark_ms <= wall_ms() + HOUR_MS


def test_sane_watermark_keeps_an_honest_one() -> None:
    now = wall_ms()
    assert sane_watermark(now - 5000, 3600, wall=lambda: now) == now - 5000
    assert sane_watermark(0, 3600, wall=lambda: now) == 0  # nothing trained yet
    assert sane_watermark(now + 10 * HOUR_MS, 3600, wall=lambda: now) == now + HOUR_MS
