"""The item click-rate reference: scores before it counts, and sees the lifecycle's fresh signal."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from airflow_provider_primus.bench.item_ctr import item_ctr_reference
from airflow_provider_primus.gen.clicklog import World

WORLD = World(
    seed=7,
    start=datetime(2026, 2, 1, tzinfo=UTC),
    history_days=6,
    stream_days=2,
    rows_per_day=20_000,
    users=2_000,
    items=1_000,
)


def test_the_stream_teaches_the_counter_more_with_the_item_lifecycle() -> None:
    life = item_ctr_reference(WORLD, 512)
    assert set(life) == {"history", "history_and_stream"}
    assert 0.5 < life["history"] < 1.0 and 0.5 < life["history_and_stream"] < 1.0
    # New items take a large share of the stream and items' heats move daily: counting the stream helps.
    assert life["history_and_stream"] > life["history"] + 0.005
    # Nothing about items moves and none is born: the history's counts are as good as the stream's.
    still = replace(WORLD, item_lifecycle=False, drift=0.0, new_items_per_day=0.0)
    ref = item_ctr_reference(still, 512)
    assert abs(ref["history_and_stream"] - ref["history"]) < 0.003
    assert item_ctr_reference(WORLD, 512) == life  # deterministic


def test_a_stream_row_is_scored_before_it_is_counted() -> None:
    """One step covering the whole stream: nothing of the stream is counted before it is scored, so
    the two versions are the same scores."""
    ref = item_ctr_reference(replace(WORLD, stream_days=1), WORLD.rows_per_day)
    assert ref["history"] == ref["history_and_stream"]


def test_needs_a_stream() -> None:
    with pytest.raises(ValueError, match="stream day"):
        item_ctr_reference(replace(WORLD, stream_days=0), 512)
