"""Multi-hot columns in the built-in models: pooled by their own ``EmbeddingBag``, trained with
sparse gradients, row-wise sharded like any table, and served from a snapshot's record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from airflow_provider_primus.bench.sharding import ShardingRun, spawn, train
from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.training.checkpoints.served import model_record, served_model
from airflow_provider_primus.training.dcn_v2 import DCNv2
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import REPLICATED, ROW_WISE, RowWiseTable, build_model

BASE: dict[str, Any] = {
    "num_dense": 2,
    "embedding_dim": 4,
    "bottom_mlp": [8, 4],
    "top_mlp": [8],
    "seed": 3,
}
KINDS = [(DLRM, {}), (DCNv2, {"cross_layers": 2, "cross_rank": None})]


def bag(rows: list[list[int]]) -> Bag:
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    ids = torch.tensor([i for r in rows for i in r], dtype=torch.int64)
    return Bag(ids=ids, offsets=torch.cumsum(lengths, 0) - lengths)


def lists(pooling: str = "sum") -> list[dict[str, Any]]:
    return [{"column": "recent", "num_embeddings": 20, "pooling": pooling}]


@pytest.mark.parametrize(("cls", "extra"), KINDS)
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_a_one_id_list_scores_like_the_same_single_valued_column(
    cls: type[DLRM], extra: dict[str, Any], pooling: str
) -> None:
    """The multi-hot table is drawn after the single-valued ones: a model with ``recent`` as a list
    of one ID is the model with it as a last sparse column, weight for weight and logit for logit."""
    single = cls(num_embeddings=[10, 20], **BASE, **extra)
    multi = cls(num_embeddings=[10], multi_hot=lists(pooling), **BASE, **extra)
    assert [tuple(v.shape) for v in single.state_dict().values()] == [
        tuple(v.shape) for v in multi.state_dict().values()
    ]
    assert all(
        torch.equal(a, b)
        for a, b in zip(single.state_dict().values(), multi.state_dict().values(), strict=True)
    )
    sparse = torch.tensor([[1, 7], [9, 19], [0, 0]])
    dense = torch.tensor([[0.5, 3.0], [1.0, -2.0], [0.0, 0.0]])
    with torch.no_grad():
        expected = single(sparse, dense)
        got = multi(sparse[:, :1], dense, {"recent": bag([[7], [19], [0]])})
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(("cls", "extra"), KINDS)
def test_lists_pool_as_declared_and_train_with_sparse_gradients(
    cls: type[DLRM], extra: dict[str, Any]
) -> None:
    model = cls(num_embeddings=[10], multi_hot=lists("mean"), **BASE, **extra)
    table = model.embeddings[1]
    assert isinstance(table, torch.nn.EmbeddingBag) and table.mode == "mean" and table.sparse
    recent = bag([[1, 2, 3], [], [4]])
    pooled = table(recent.ids, recent.offsets)
    torch.testing.assert_close(pooled[0], table.weight[[1, 2, 3]].mean(0))
    assert torch.equal(pooled[1], torch.zeros(4))  # an empty list pools to zeros
    logits = model(torch.tensor([[1], [2], [3]]), torch.zeros(3, 2), {"recent": recent})
    assert logits.shape == (3,)
    logits.sum().backward()
    grad = table.weight.grad
    assert grad is not None and grad.is_sparse
    assert set(grad.coalesce().indices()[0].tolist()) == {1, 2, 3, 4}


def test_a_missing_or_misaligned_bag_names_the_column() -> None:
    model = DLRM(num_embeddings=[10], multi_hot=lists(), **BASE)
    sparse, dense = torch.tensor([[1], [2]]), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="multi-hot column 'recent' has no bag in this batch"):
        model(sparse, dense)
    with pytest.raises(ValueError, match="multi-hot column 'recent' has 3 rows, the batch 2"):
        model(sparse, dense, {"recent": bag([[1], [], [2]])})
    with pytest.raises(ValueError, match="'recent': pooling must be one of"):
        DLRM(num_embeddings=[10], multi_hot=[{**lists()[0], "pooling": "max"}], **BASE)


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_a_row_wise_list_table_of_one_shard_pools_like_an_embedding_bag(pooling: str) -> None:
    whole = build_model([REPLICATED, REPLICATED], 0, 1, num_embeddings=[10], multi_hot=lists(pooling), **BASE)
    sharded = build_model([REPLICATED, ROW_WISE], 0, 1, num_embeddings=[10], multi_hot=lists(pooling), **BASE)
    assert isinstance(sharded.embeddings[1], RowWiseTable) and sharded.embeddings[1].mode == pooling
    recent = bag([[1, 2, 3], [], [4], [5, 5]])
    table = sharded.embeddings[1]
    torch.testing.assert_close(
        table(recent.ids, recent.offsets), whole.embeddings[1](recent.ids, recent.offsets)
    )
    sparse, dense = torch.tensor([[1], [2], [3], [4]]), torch.randn(4, 2)
    with torch.no_grad():
        torch.testing.assert_close(
            sharded(sparse, dense, {"recent": recent}), whole(sparse, dense, {"recent": recent})
        )


def test_two_row_wise_trainers_with_list_tables_train_like_the_replicated_model(tmp_path: Path) -> None:
    """Sum and mean list tables split over two trainers (each pooling the rows its owners send back)
    end where the replicated model ends on the same global batches."""
    run = ShardingRun(
        rows=(300,),
        plan=(REPLICATED, ROW_WISE, ROW_WISE),
        multi_hot=((200, "sum"), (100, "mean")),
        out=str(tmp_path),
        steps=4,
        batch_rows=64,
    )
    trainers = spawn(run, 2)
    reference = DLRM(**run.model_args())
    train(reference, Optimizers(reference), Group(), run)
    expected = reference.state_dict()
    for j in (1, 2):
        got = torch.cat([t["model"][f"embeddings.{j}.weight"] for t in trainers])
        torch.testing.assert_close(got, expected[f"embeddings.{j}.weight"], rtol=1e-5, atol=1e-6)
    for key, value in expected.items():
        if not key.startswith("embeddings."):
            torch.testing.assert_close(trainers[0]["model"][key], value, rtol=1e-5, atol=1e-6)


class _Snapshot:
    def __init__(self, record: dict[str, Any], state: dict[str, Any]) -> None:
        self.version, self.manifest, self._state = 1, {"model": record}, state

    def load_state(self) -> dict[str, Any]:
        return self._state


def test_a_served_snapshot_rebuilds_the_list_tables_from_its_record() -> None:
    args = {"num_embeddings": [10], "multi_hot": lists("mean"), "dense_transform": "log1p", **BASE}
    model = DLRM(**args).eval()
    record = model_record(args, ["user"], ["a", "b"])
    assert record["multi_hot"] == lists("mean")
    assert "multi_hot" not in model_record({**args, "multi_hot": []}, ["user"], ["a", "b"])
    served = served_model(_Snapshot(record, model.state_dict()))
    sparse, dense, recent = torch.tensor([[1], [2]]), torch.randn(2, 2), bag([[3, 4], []])
    with torch.no_grad():
        assert torch.equal(
            served(sparse, dense, {"recent": recent}), model(sparse, dense, {"recent": recent})
        )


def test_a_user_model_is_handed_the_bags_its_schema_announces() -> None:
    from airflow_provider_primus.training.protocol import Features, FeatureSchema, SparseFeature
    from airflow_provider_primus.training.user_model import UserModel

    schema = FeatureSchema(
        sparse=(SparseFeature("a", 10), SparseFeature("r", 20, multi_hot=True, pooling="mean", max_length=4)),
        dense=(),
        embedding_dim=4,
    )
    assert [f.name for f in schema.single_hot] == ["a"] and [f.name for f in schema.multi_hot] == ["r"]
    seen: dict[str, Bag] = {}

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.EmbeddingBag(20, 1, mode="mean", sparse=True)

        def forward(self, features: Features) -> torch.Tensor:
            seen.update(features.bags)
            bag = features.bags["r"]
            out: torch.Tensor = self.table(bag.ids, bag.offsets).squeeze(1)
            return out

    model = UserModel(Pooled(), schema, "m:Pooled")
    assert model.bag_columns == ("r",) and model.num_sparse == 1
    recent = bag([[1, 2], []])
    logits = model(torch.tensor([[1], [2]]), torch.zeros(2, 0), {"r": recent})
    assert logits.shape == (2,) and seen["r"] is recent
    with pytest.raises(ValueError, match=r"multi-hot column\(s\) \['r'\] have no bag in this batch"):
        model(torch.tensor([[1], [2]]), torch.zeros(2, 0))
