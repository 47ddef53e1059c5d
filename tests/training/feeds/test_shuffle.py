"""The shuffle buffer on its own: every row once, never across a window, seeded, resumable."""

from __future__ import annotations

import io

import numpy as np
import torch

from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.feeds.shuffle import ShuffleBuffer


def batch(first: int, rows: int, window: str, task: str) -> TensorBatch:
    ids = np.arange(first, first + rows, dtype=np.int64)
    return TensorBatch(
        sparse=torch.from_numpy(np.stack([ids, ids * 7], axis=1)),
        dense=torch.from_numpy(ids.astype(np.float32)[:, None]),
        labels=torch.from_numpy((ids % 2).astype(np.float32)),
        event_time_ms=torch.from_numpy(ids * 1000),
        extra={"row_id": ids.copy()},
        origin=task,
        positions=np.arange(rows, dtype=np.int64),
        window=window,
    )


def served() -> list[TensorBatch]:
    """Two windows of three tasks each, served in order, 500 rows a batch."""
    out = []
    for w in range(2):
        for t in range(3):
            for b in range(2):
                first = w * 3000 + t * 1000 + b * 500
                out.append(batch(first, 500, f"w{w}", f"task-{w}-{t}"))
    return out


def drain(
    buffer: ShuffleBuffer, feed: list[TensorBatch], step: int = 256, until: int | None = None
) -> list[int]:
    """Feed batches as a trainer would (keeping the pool full ahead of each step) and take steps."""
    taken: list[int] = []
    while feed or len(buffer):
        while feed and len(buffer) < step + buffer.wants():
            buffer.put(feed.pop(0))
        for b in buffer.take(step):
            assert len(b.row_origins()) == len(b)
            assert np.array_equal(b.extra["row_id"], b.sparse[:, 0].numpy())  # columns stay aligned
            assert np.array_equal(b.event_time_ms.numpy(), b.extra["row_id"] * 1000)
            taken += b.extra["row_id"].tolist()
        if until is not None and len(taken) >= until:
            break
    return taken


def test_every_row_once_within_its_window_and_shuffled() -> None:
    taken = drain(ShuffleBuffer(1200, seed=3), served())
    assert sorted(taken) == list(range(6000))
    windows = [i // 3000 for i in taken]
    assert windows == sorted(windows)  # window 0 entirely before window 1
    assert taken[:3000] != sorted(taken[:3000])
    # The pool spans tasks: the first step already mixes rows of more than one task.
    assert len({i // 1000 for i in taken[:256]}) > 1


def test_the_same_seed_draws_the_same_order_and_another_seed_does_not() -> None:
    assert drain(ShuffleBuffer(1200, seed=3), served()) == drain(ShuffleBuffer(1200, seed=3), served())
    assert drain(ShuffleBuffer(1200, seed=3), served()) != drain(ShuffleBuffer(1200, seed=4), served())


def test_memory_stays_bounded_by_the_buffer() -> None:
    buffer = ShuffleBuffer(1200, seed=0)
    feed = served()
    while feed or len(buffer):
        while feed and len(buffer) < 256 + buffer.wants():
            buffer.put(feed.pop(0))
        assert len(buffer) <= 1200 + 256 + 500  # the pool, a step ahead, one served batch
        buffer.take(256)


def test_a_buffer_restored_from_its_state_draws_what_the_uninterrupted_one_would() -> None:
    reference = drain(ShuffleBuffer(1200, seed=9), served())
    feed = served()
    first = ShuffleBuffer(1200, seed=9)
    head = drain(first, feed, until=2048)
    saved = io.BytesIO()
    torch.save(first.state(), saved)  # as a checkpoint stores it
    saved.seek(0)
    restored = ShuffleBuffer(1200, seed=9, state=torch.load(saved, weights_only=False))
    assert head + drain(restored, feed) == reference
