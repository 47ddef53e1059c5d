"""Multi-hot columns as tensors: ``to_tensors`` builds the bags, and slicing, gathering, joining and
shuffling rows keep every row's IDs with it."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import torch

from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.data.tensors import TensorBatch, concat_batches, to_tensors
from airflow_provider_primus.training.feeds.shuffle import ShuffleBuffer


def lists(bag: Bag) -> list[list[int]]:
    """The bag as Python lists, row by row (tests only)."""
    starts = bag.offsets.tolist()
    ends = [*starts[1:], bag.ids.shape[0]][: len(starts)]
    return [bag.ids[s:e].tolist() for s, e in zip(starts, ends, strict=True)]


def batch(rows: list[list[int]], first: int = 0) -> TensorBatch:
    ids = np.arange(first, first + len(rows), dtype=np.int64)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    return TensorBatch(
        sparse=torch.from_numpy(ids[:, None].copy()),
        dense=torch.zeros((len(rows), 0)),
        labels=torch.zeros(len(rows)),
        extra={"row_id": ids.copy()},
        bags={
            "items": Bag(
                ids=torch.tensor([i for r in rows for i in r], dtype=torch.int64),
                offsets=torch.cumsum(lengths, 0) - lengths,
            )
        },
    )


def test_to_tensors_builds_a_bag_per_list_column_and_leaves_extras_alone() -> None:
    table = pa.record_batch(
        {
            "u": pa.array([1, 2, 3]),
            "items": pa.array([[4, 5], [], [6]], type=pa.list_(pa.int32())),
            "label": pa.array([1.0, 0.0, 1.0], type=pa.float32()),
            "keys": pa.array([["a"], [], []]),
        }
    )
    out = to_tensors(table.slice(1, 2), sparse=["u"], dense=[], extra=["keys"])
    assert list(out.bags) == ["items"]
    bag = out.bags["items"]
    assert bag.ids.dtype == bag.offsets.dtype == torch.int64
    assert lists(bag) == [[], [6]] and bag.offsets.tolist() == [0, 0]
    assert out.sparse[:, 0].tolist() == [2, 3]


def test_slice_rows_and_concat_keep_ids_with_their_rows() -> None:
    data = [[1, 2], [], [3], [4, 5, 6], []]
    b = batch(data)
    assert lists(b.slice(1, 4).bags["items"]) == data[1:4]
    assert b.slice(1, 4).bags["items"].offsets.tolist() == [0, 0, 1]
    assert lists(b.slice(4, 5).bags["items"]) == [[]]
    assert lists(b.slice(2, 2).bags["items"]) == []
    assert lists(b.rows(np.array([3, 0, 4, 3], dtype=np.int64)).bags["items"]) == [
        [4, 5, 6],
        [1, 2],
        [],
        [4, 5, 6],
    ]
    assert lists(b.rows(np.array([], dtype=np.int64)).bags["items"]) == []
    joined = concat_batches([b.slice(3, 5), batch([[7], [8, 9]], first=5), b.slice(0, 1)])
    assert lists(joined.bags["items"]) == [[4, 5, 6], [], [7], [8, 9], [1, 2]]


def test_the_shuffle_buffer_moves_each_rows_ids_with_it_and_resumes_exactly() -> None:
    def served() -> list[TensorBatch]:
        # Row r holds IDs r*10 .. r*10 + r%4 - 1: its length and content say which row it is.
        return [
            batch([[r * 10 + k for k in range(r % 4)] for r in range(f, f + 50)], f)
            for f in range(0, 400, 50)
        ]

    def drain(buffer: ShuffleBuffer, feed: list[TensorBatch], steps: int | None = None) -> list[int]:
        taken: list[int] = []
        while (feed or len(buffer)) and (steps is None or steps > 0):
            while feed and len(buffer) < 32 + buffer.wants():
                buffer.put(feed.pop(0))
            for b in buffer.take(32):
                for r, ids in zip(b.extra["row_id"].tolist(), lists(b.bags["items"]), strict=True):
                    assert ids == [r * 10 + k for k in range(r % 4)]
                taken += b.extra["row_id"].tolist()
            steps = None if steps is None else steps - 1
        return taken

    whole = drain(ShuffleBuffer(100, seed=1), served())
    assert sorted(whole) == list(range(400)) and whole != list(range(400))
    feed = served()
    first = ShuffleBuffer(100, seed=1)
    head = drain(first, feed, steps=4)
    saved = io.BytesIO()
    torch.save(first.state(), saved)
    saved.seek(0)
    resumed = ShuffleBuffer(100, seed=1, state=torch.load(saved, weights_only=False))
    assert head + drain(resumed, feed) == whole
