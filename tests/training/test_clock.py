"""The training clock: the rules alone on a deterministic wall clock, then ``clock: auto`` (the
default) in whole runs on the real broker, real executor processes and real files.

- old history and an old stream are a backfill: replayed, and the clock stays the replay's;
- live stream events make ``auto`` switch to the wall clock once, with one ``ClockSwitched`` event,
  and never back;
- the clock's state is in the checkpoint: a run resumed before the switch switches at the same step
  as an uninterrupted run, one resumed after it starts on the wall clock, and the trained rows are the
  same step by step.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.contracts.status import ClockPayload, EventType, payload_model
from airflow_provider_primus.contracts.training import Freshness
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.clock import TrainingClock
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import T0, World, events, to_json

HOUR_MS = 3_600_000
NOW_MS = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)


class Wall:
    """A wall clock the test moves."""

    def __init__(self, ms: int = NOW_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def clock(wall: Wall, **freshness: Any) -> TrainingClock:
    return TrainingClock(Freshness.model_validate(freshness), wall=wall)


def test_explicit_clocks_keep_their_meaning_and_never_switch() -> None:
    wall = Wall()
    fixed = clock(wall, clock="wall")
    assert (fixed.in_force, fixed.replay, fixed.now_ms(123)) == ("wall", False, NOW_MS)
    replay = clock(wall, clock="replay")
    assert (replay.in_force, replay.replay, replay.now_ms(123)) == ("replay", True, 123)
    for c in (fixed, replay):
        assert c.observe(10, NOW_MS) is None and c.history_idle(10, NOW_MS) is None
        assert c.switch is None


def test_auto_replays_old_data_and_switches_once_when_the_watermark_is_live() -> None:
    wall = Wall()
    auto = clock(wall)  # the default
    assert (auto.setting, auto.in_force, auto.live_lag_s) == ("auto", "replay", 3600.0)
    assert auto.observe(0, 0) is None  # nothing trained yet says nothing about the data's age
    years_old = NOW_MS - 3 * 365 * 24 * HOUR_MS
    assert auto.observe(5, years_old) is None and auto.now_ms(years_old) == years_old
    assert auto.observe(6, NOW_MS - HOUR_MS - 1) is None  # just beyond the hour
    switch = auto.observe(7, NOW_MS - 90_000)
    assert switch is not None and auto.in_force == "wall" and auto.now_ms(years_old) == NOW_MS
    payload = ClockPayload.model_validate(switch.payload())
    assert (payload.from_clock, payload.to_clock, payload.reason) == ("replay", "wall", "live")
    assert (payload.step, payload.lag_s, payload.live_lag_s) == (7, 90.0, 3600.0)
    assert payload.watermark == datetime.fromtimestamp((NOW_MS - 90_000) / 1000, tz=UTC).isoformat()
    wall.ms += 10 * 24 * HOUR_MS  # an outage later: the data trails by days again...
    assert auto.observe(8, NOW_MS) is None and auto.history_idle(8, NOW_MS) is None
    assert auto.in_force == "wall"  # ...and the clock stays the wall's: no flapping
    assert auto.summary() == {"setting": "auto", "in_force": "wall", "switched": switch.payload()}


def test_auto_goes_live_when_the_history_cannot_reach_the_held_back_stream() -> None:
    auto = clock(Wall(), live_lag_s=60.0)
    switch = auto.history_idle(3, NOW_MS - 2 * 24 * HOUR_MS)
    assert switch is not None and switch.reason == "history_idle" and auto.in_force == "wall"
    assert "waiting for it would starve live data" in switch.message()
    nothing_yet = clock(Wall()).history_idle(0, 0)  # an open graph before its first window
    assert nothing_yet is not None and nothing_yet.payload()["watermark"] is None
    assert nothing_yet.payload()["lag_s"] is None


def test_only_auto_state_is_restored_and_only_into_auto() -> None:
    wall = Wall()
    switched = clock(wall)
    switched.observe(4, NOW_MS)
    state = switched.state_dict()
    again = clock(Wall(NOW_MS + 100 * 24 * HOUR_MS))  # a later restart: lag says replay now
    again.load_state_dict(state)
    assert (again.in_force, again.switch) == ("wall", switched.switch)
    explicit = clock(wall, clock="replay")
    explicit.load_state_dict(state)  # an explicit clock wins over the checkpoint's choice
    assert explicit.in_force == "replay"
    fresh = clock(wall)
    fresh.load_state_dict(clock(wall, clock="wall").state_dict())  # not auto's: choose afresh
    fresh.load_state_dict(None)  # a checkpoint from before ``auto``
    assert (fresh.in_force, fresh.switch) == ("replay", None)


# -- whole runs --------------------------------------------------------------------------------------


def produce_at(world: World, rows: int, seed: int, when: datetime) -> list[int]:
    """``rows`` events stamped ``when`` (the conftest's worlds spread theirs over an hour)."""
    table = events(world.next_id, rows, when, seed)
    stamps = pa.array([when] * rows, pa.timestamp("us", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("ts"), "ts", stamps)
    world.next_id += rows
    world.produce(to_json(table))
    return [int(x) for x in table.column("row_id").to_pylist()]


class Run:
    """One in-process trainer run: its trace (row ids per step), its job events and its result."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, list[tuple[str, list[int]]]]] = []
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.clock_at_start: str | None = None
        self.result: dict[str, Any] = {}

    def trace(self, step: int, parts: list[tuple[str, TensorBatch]]) -> None:
        self.steps.append((step, [(n, [int(x) for x in b.extra["row_id"]]) for n, b in parts]))

    def until(self, trainer: Trainer) -> bool:
        if self.clock_at_start is None:
            self.clock_at_start = trainer.clock.in_force
        return False

    def switches(self) -> list[dict[str, Any]]:
        return [data for type_, _, data in self.events if type_ == EventType.CLOCK_SWITCHED]


def train(world: World, workdir: Path, training: Path, max_steps: int | None = None) -> Run:
    run = Run()
    options = TrainOptions(
        workdir=workdir,
        passthrough=("row_id",),
        trace=run.trace,
        until=run.until,
        max_steps=max_steps,
        on_event=lambda t, m, d: run.events.append((t, m, d)),
    )
    run.result = Trainer(load_data_spec(world.spec_path), load_training_spec(training), options).run()
    return run


def trained(run: Run, source: str) -> list[int]:
    """The steps that trained rows of ``source``."""
    return [step for step, parts in run.steps if any(n == source and rows for n, rows in parts)]


def spec(world: World, path: Path, **freshness: Any) -> Path:
    return world.training(
        path,
        batch_size=256,
        mixing={"freshness": freshness} if freshness else {},
        checkpoint={"every_steps": 0, "every_s": 0},
        publish={"every_s": 0},
    )


def test_auto_replays_an_old_backfill_and_stays_on_the_replay_clock(world: World, tmp_path: Path) -> None:
    produced = world.produce_events(2000, seed=5, hour=4)  # the hour after the history: old too
    run = train(world, tmp_path / "w", spec(world, tmp_path / "t.yaml"))
    assert run.result["rows_trained"] == {"history": world.history_rows, "events": len(produced)}
    assert run.switches() == []
    assert run.result["clock"] == {"setting": "auto", "in_force": "replay", "switched": None}
    # Replayed: every stream event is newer than the history, so it waited for all of it...
    assert min(trained(run, "events")) > max(trained(run, "history"))
    # ...and its freshness is measured against the replayed "now", not months of wall clock.
    assert run.result["freshness_s"]["p99"] < 3600


def test_auto_goes_live_once_and_a_resumed_run_keeps_the_clock(world: World, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    live = produce_at(world, 1000, seed=6, when=now - timedelta(seconds=5))
    old = produce_at(world, 1000, seed=7, when=T0 + timedelta(hours=5))  # then old again
    training = spec(world, tmp_path / "t.yaml")
    reference = train(world, tmp_path / "uninterrupted", training)
    assert reference.result["rows_trained"] == {"history": world.history_rows, "events": len(live + old)}

    (switch,) = reference.switches()  # once, though old events are trained after it
    payload = payload_model(EventType.CLOCK_SWITCHED).model_validate(switch)
    assert isinstance(payload, ClockPayload)
    assert (payload.from_clock, payload.to_clock, payload.reason) == ("replay", "wall", "live")
    assert payload.lag_s is not None and payload.lag_s < 600
    # Replayed until then: the live events waited for the whole history, and the clock switched
    # right after the first step that trained them.
    first_live = min(trained(reference, "events"))
    assert first_live > max(trained(reference, "history"))
    assert payload.step == first_live
    assert reference.result["clock"] == {"setting": "auto", "in_force": "wall", "switched": switch}

    workdir = tmp_path / "resumed"
    before = train(world, workdir, training, max_steps=first_live // 2)
    assert before.switches() == [] and before.result["clock"]["in_force"] == "replay"
    across = train(world, workdir, training, max_steps=first_live + 3)
    assert across.clock_at_start == "replay"  # the checkpoint's replay, switching at the same step
    assert [(s["step"], s["reason"]) for s in across.switches()] == [(payload.step, "live")]
    # A threshold that would call the data old by now: the checkpoint's choice stands, no new event.
    strict = spec(world, tmp_path / "strict.yaml", live_lag_s=0.001)
    after = train(world, workdir, strict)
    assert after.clock_at_start == "wall" and after.switches() == []
    assert after.result["clock"]["switched"]["step"] == payload.step

    steps = before.steps + across.steps + after.steps
    assert [s for s, _ in steps] == [s for s, _ in reference.steps]
    assert [p for _, p in steps] == [p for _, p in reference.steps]
