"""History handling in a real trainer process: the seeded shuffle within each window and the replay
of finished windows, both with exact resume after SIGKILL and the primary pass still exactly once.

The world has four hourly windows of 5,000 rows (row ids ``hour * 5000 + i``), tasks of 2,000 rows
and row groups of 1,000, and a stream whose events come after history's first hours.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.training.conftest import World
from tests.training.test_runtime import run_trainer

HISTORY_ROWS_PER_HOUR = 5000


def trained(steps: list[dict[str, Any]], name: str) -> list[int]:
    """Row ids of one feed's rows, in training order (trace rows: name, origin, position, row_id)."""
    return [row[3] for s in steps for row in s["rows"] if row[0] == name]


def resumed_steps(
    world: World, workdir: Path, training: Path, kills: tuple[int, ...]
) -> tuple[list[Any], Any]:
    """The steps a run killed at ``kills`` and resumed each time trains, up to each checkpoint."""
    combined: list[dict[str, Any]] = []
    for kill_at in kills:
        segment = run_trainer(world, workdir, training, kill_at=kill_at)
        resumed_from = combined[-1]["step"] if combined else 0
        assert segment["steps"][0]["step"] == resumed_from + 1
        combined += [s for s in segment["steps"] if s["step"] <= segment["checkpoint"]]
    last = run_trainer(world, workdir, training)
    return combined + last["steps"], last["result"]


def test_history_is_shuffled_within_each_window_seeded_and_resumes_exactly(
    world: World, tmp_path: Path
) -> None:
    world.produce_events(2000, seed=10)
    spec = {
        "mode": "batch",
        "batch_size": 256,
        "seed": 5,
        "mixing": {"shuffle": {"buffer_rows": 1500}},  # smaller than a window, larger than a task
        "checkpoint": {"every_steps": 5, "every_s": 0},
        "publish": {"every_s": 0},
    }
    training = world.training(tmp_path / "training.yaml", **spec)
    reference = run_trainer(world, tmp_path / "uninterrupted", training)
    order = trained(reference["steps"], "history")
    assert sorted(order) == list(range(world.history_rows))  # every planned row once
    hours = [row_id // HISTORY_ROWS_PER_HOUR for row_id in order]
    assert hours == sorted(hours)  # never across a window: the hours still train in time order
    assert order != sorted(order)
    assert len({row_id // 1000 for row_id in order[:256]}) > 1  # a step mixes row groups

    again = run_trainer(world, tmp_path / "again", training)
    assert trained(again["steps"], "history") == order  # seeded: reproducible
    other = world.training(tmp_path / "other.yaml", **{**spec, "seed": 6})
    assert trained(run_trainer(world, tmp_path / "other", other)["steps"], "history") != order

    steps, result = resumed_steps(world, tmp_path / "crashing", training, kills=(7, 33))
    assert [s["rows"] for s in steps] == [s["rows"] for s in reference["steps"]]
    assert result["rows_trained"] == reference["result"]["rows_trained"]


def test_replay_draws_from_finished_windows_and_is_counted_apart(world: World, tmp_path: Path) -> None:
    # Stream events from hour 1 on: released (replay clock) while history is still being trained.
    stream_ids = world.produce_events(4000, seed=11, hour=1)
    training = world.training(
        tmp_path / "training.yaml",
        batch_size=256,
        seed=2,
        mixing={"replay": {"share": 0.25}, "freshness": {"clock": "replay"}},
        checkpoint={"every_steps": 5, "every_s": 0},
        publish={"every_s": 0},
    )
    reference = run_trainer(world, tmp_path / "uninterrupted", training)
    result, steps = reference["result"], reference["steps"]
    # The primary pass and the stream: exactly once, as without replay.
    assert Counter(trained(steps, "history")) == Counter(range(world.history_rows))
    assert Counter(trained(steps, "events")) == Counter(stream_ids)
    assert result["rows_trained"] == {"history": world.history_rows, "events": len(stream_ids)}
    replayed = trained(steps, "history:replay")
    assert replayed and result["rows_replayed"] == {"history": len(replayed)}
    assert all(row_id < world.history_rows for row_id in replayed)

    # Only from windows the primary pass had finished when the replayed row was trained.
    newest_hour, during_history = -1, 0
    for s in steps:
        history_hours = [r[3] // HISTORY_ROWS_PER_HOUR for r in s["rows"] if r[0] == "history"]
        replay_hours = [r[3] // HISTORY_ROWS_PER_HOUR for r in s["rows"] if r[0] == "history:replay"]
        newest_hour = max([newest_hour, *history_hours])
        if replay_hours and history_hours:
            assert max(replay_hours) < min(history_hours)
            during_history += 1
        assert all(h <= newest_hour for h in replay_hours)
        if replay_hours:  # replay only rides along with the stream's or history's rows
            assert len(s["rows"]) > len(replay_hours)
    assert during_history  # replay rode along the primary pass too, not only after it
    # About its share of the steps that had it (rounding carried: no drift).
    with_replay = [s for s in steps if any(r[0] == "history:replay" for r in s["rows"])]
    share = sum(sum(r[0] == "history:replay" for r in s["rows"]) for s in with_replay) / sum(
        len(s["rows"]) for s in with_replay
    )
    assert abs(share - 0.25) < 0.02

    resumed, last = resumed_steps(world, tmp_path / "crashing", training, kills=(9, 41))
    assert [s["rows"] for s in resumed] == [s["rows"] for s in steps]
    assert last["rows_replayed"] == result["rows_replayed"]
