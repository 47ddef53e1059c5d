"""Mode-correct training and event-time units, on the real broker, real executors and real files.

- ``batch``: the stream is only scored, and never changes what history is trained: a lagging stream
  and an empty one give the same history rows, step by step, with no guard and nothing deferred;
- ``stream``: history is not read, let alone trained;
- integer event times in a stream are read in the schema's declared unit; rows whose times are
  implausible (epoch seconds read as milliseconds) are dead-lettered by the default event-time
  policy with the unit that fits named, and counted in the job's figures where a policy admits them.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import T0, World, events, letters_on, rows_by_source

# The wall clock, so the old test data makes a stream that lags by any measure; the guard acts on
# 100 unconsumed records.
LAGGING = {"freshness": {"clock": "wall", "max_lag_records": 100, "max_event_age_s": None}}
QUIET = {"checkpoint": {"every_steps": 0, "every_s": 0}, "publish": {"every_s": 0}}


def run(
    world: World, tmp_path: Path, name: str, **spec: Any
) -> tuple[Trainer, dict[str, Any], list[dict[str, list[int]]]]:
    """A trainer run in-process: the trainer, its result, and per step the row ids of each source."""
    data = load_data_spec(world.spec_path)
    training = load_training_spec(world.training(tmp_path / f"{name}.yaml", batch_size=256, **QUIET, **spec))
    steps: list[dict[str, list[int]]] = []
    trace = rows_by_source(steps)
    trainer = Trainer(
        data, training, TrainOptions(workdir=tmp_path / name, trace=trace, passthrough=("row_id",))
    )
    return trainer, trainer.run(), steps


def test_batch_mode_trains_history_as_if_there_were_no_stream(world: World, tmp_path: Path) -> None:
    _, alone, alone_steps = run(world, tmp_path, "empty-stream", mode="batch", mixing=LAGGING)
    assert alone["rows_trained"] == {"history": world.history_rows} and alone["rows_scored"] == 0
    produced = world.produce_events(6000, seed=5)  # 60 times what the guard tolerates
    _, lagging, steps = run(world, tmp_path, "lagging-stream", mode="batch", mixing=LAGGING)

    assert lagging["rows_trained"] == {"history": world.history_rows}  # the stream is never trained
    assert lagging["rows_scored"] == len(produced) and lagging["progressive"]["auc"] is not None
    assert lagging["guard_steps"] == 0 and lagging["deferred"] == {}  # and history never waits for it
    # Step by step, the same history rows as with no stream at all: full batches, same order.
    history = [s.get("history", []) for s in steps]
    assert history[: len(alone_steps)] == [s["history"] for s in alone_steps]
    assert all(len(h) == 256 for h in history[: len(alone_steps) - 1])
    assert not any(history[len(alone_steps) :])
    # The stream is scored alongside the history it follows (not all at the start, nor all at the end).
    scored = [s.get("events", []) for s in steps]
    assert sorted(r for rows in scored for r in rows) == sorted(produced)
    assert sum(len(rows) for rows in scored[: len(alone_steps) // 2]) > 0.3 * len(produced)
    assert all(len(rows) <= 256 * 0.25 / 0.75 + 1 for rows in scored[: len(alone_steps) - 1])


def test_stream_mode_never_reads_history(world: World, tmp_path: Path) -> None:
    produced = world.produce_events(1500, seed=6)
    trainer, result, steps = run(world, tmp_path, "stream", mode="stream")
    assert "history" not in trainer.feeds  # not opened: no plan, no data executor, no rows read
    assert result["rows_trained"] == {"events": len(produced)}
    assert {source for step in steps for source in step} == {"events"}
    assert Counter(r for step in steps for r in step["events"]) == Counter(produced)


def produce_in_seconds(world: World, rows: int, seed: int) -> list[int]:
    """Events whose ``ts`` is an integer count of epoch seconds; their times, in seconds."""
    table = events(world.next_id, rows, T0 + timedelta(hours=4), seed)
    world.next_id += rows
    messages, times = [], []
    for row in table.to_pylist():
        row["ts"] = int(row["ts"].timestamp())
        times.append(row["ts"])
        messages.append(json.dumps(row).encode())
    world.produce(messages)
    return times


def policy(world: World, event_time_policy: dict[str, Any]) -> None:
    doc = yaml.safe_load(world.spec_path.read_text())
    doc["spec"]["sources"][1]["event_time_policy"] = event_time_policy
    world.spec_path.write_text(yaml.safe_dump(doc))


def declare(world: World, event_time: Any) -> None:
    doc = yaml.safe_load(world.spec_path.read_text())
    doc["spec"]["sources"][1]["schema"]["event_time"] = event_time
    world.spec_path.write_text(yaml.safe_dump(doc))


def test_epoch_seconds_in_a_stream_honour_the_declared_unit(world: World, tmp_path: Path) -> None:
    times = produce_in_seconds(world, 800, seed=7)
    stream = {"mode": "stream", "mixing": {"freshness": {"clock": "wall"}}}

    # No unit declared: read as milliseconds they fall in January 1970, before the default
    # event_time_policy floor, so each is dead-lettered with a reason that names the unit that fits.
    _, refused, _ = run(world, tmp_path, "refused", **stream)
    assert refused["rows_trained"] == {} and refused["dead_lettered"] == 800
    assert refused["watermark"] is None  # the watermark only moves with accepted events
    letters = letters_on(world.bootstrap, f"{world.topic}.dlq", expected=800)
    reason = dict(letters[0].headers)["primus.error"].decode()
    assert "before event_time_policy.min_event_time" in reason, reason
    assert "fit epoch seconds: declare event_time: {column: ts, unit: s}" in reason, reason

    # A floor at the epoch lets them through: trained, and every row counted, not silently accepted.
    policy(world, {"min_event_time": "1970-01-01T00:00:00Z"})
    trainer, undeclared, _ = run(world, tmp_path, "undeclared", **stream)
    assert undeclared["rows_trained"] == {"events": 800}
    assert undeclared["event_time_implausible"] == {"events": 800}
    assert undeclared["watermark"].startswith("1970-01-")
    assert trainer.summary(brief=True)["event_time_implausible"] == {"events": 800}  # the job's figures

    declare(world, {"column": "ts", "unit": "s"})
    _, declared, _ = run(world, tmp_path, "declared", **stream)
    assert declared["rows_trained"] == {"events": 800}
    assert declared["event_time_implausible"] == {}
    assert declared["watermark"] == datetime.fromtimestamp(max(times), tz=UTC).isoformat()
