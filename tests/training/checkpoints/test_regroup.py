"""A checkpoint of one trainer group re-cut for a group of another size."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.checkpoints.regroup import cut_progress, regroup, trained_progress


def _batch(task: str, positions: list[int]) -> TensorBatch:
    n = len(positions)
    return TensorBatch(
        sparse=torch.zeros((n, 1), dtype=torch.int64),
        dense=torch.zeros((n, 0)),
        labels=torch.zeros(n),
        origin=task,
        positions=np.array(positions, dtype=np.int64),
    )


def _rank(
    progress: dict[str, list[tuple[int, int]]], buffered: list[TensorBatch], offsets: dict[int, int]
) -> dict[str, Any]:
    return {
        "mixer": {"m": 1},
        "scores": {"s": 1},
        "freshness": {},
        "metrics": {},
        "clock": None,
        "feeds": {
            "history": {
                "progress": progress,
                "buffered": buffered,
                "shuffle": None,
                "watermark_ms": 5,
                "window": "w",
            },
            "events": {
                "offsets": offsets,
                "dead_lettered": 1,
                "skipped_records": 2,
                "log": {"topic_id": "x"},
            },
        },
    }


def test_buffered_rows_are_not_progress() -> None:
    state = {"progress": {"t": [(0, 100)]}, "buffered": [_batch("t", [40, 41, 42])], "shuffle": None}
    assert trained_progress(state) == {"t": [(0, 40), (43, 100)]}


def test_two_trainers_become_one_and_three() -> None:
    ranks = [
        _rank({"t": [(0, 50)]}, [_batch("t", [45, 46, 47, 48, 49])], {0: 7}),
        _rank({"t": [(50, 80)], "u": [(0, 10)]}, [], {1: 9}),
    ]
    one = regroup(ranks, 1)
    assert one[0]["feeds"]["history"]["progress"] == {"t": [(0, 45), (50, 80)], "u": [(0, 10)]}
    assert one[0]["feeds"]["history"]["buffered"] == []
    stream = one[0]["feeds"]["events"]
    assert stream["offsets"] == {0: 7, 1: 9} and (stream["dead_lettered"], stream["skipped_records"]) == (
        2,
        4,
    )
    three = regroup(ranks, 3)
    assert [r["feeds"].get("history") is not None for r in three] == [True, False, False]
    assert [r["feeds"]["events"]["offsets"] for r in three] == [{0: 7, 1: 9}] * 3
    assert [r["feeds"]["events"]["dead_lettered"] for r in three] == [2, 0, 0]
    assert [r["scores"] for r in three] == [{"s": 1}, {"s": 1}, None] and three[0]["mixer"] is None
    assert cut_progress(r["feeds"].get("history") for r in three) == one[0]["feeds"]["history"]["progress"]
    assert regroup(ranks, 2) == ranks  # the same size resumes rank by rank
