"""Row-wise sharded embedding tables: trained by real trainer processes (gloo on loopback) under a
memory allotment the whole tables exceed, equal to the replicated model trained on the same rows,
checkpointed per shard and re-sharded on resume.

The allotment is enforced by the kernel, not estimated: each trainer sets RLIMIT_DATA to its data
size once started (interpreter, torch, process group) plus ``ALLOTMENT``, so any allocation past it
fails. Page-level RSS limits are not available to an unprivileged process (RLIMIT_RSS is ignored by
Linux) and a cgroup would need privileges the test suite does not assume; RLIMIT_DATA counts every
private writable mapping, which is where torch's tensors live. Each trainer first tries to build the
replicated model under it and must be refused: the evidence that the tables do not fit one trainer.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from airflow_provider_primus.bench.sharding import ShardingRun, spawn, train
from airflow_provider_primus.training.checkpoints.files import CheckpointError, CheckpointStore
from airflow_provider_primus.training.checkpoints.shards import load_model_state, shard_path
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.dlrm import DLRM, embedding_table
from airflow_provider_primus.training.gpu import footprint
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import (
    REPLICATED,
    ROW_WISE,
    RowWiseTable,
    ShardedDLRM,
    Sharding,
    build_model,
    row_bounds,
    sharding_plan,
)

MIB = 2**20
# Two 400k-row tables of dim 16: 51 MiB of weights, 102 MiB with Adagrad's state. A row-wise
# trainer holds half (51 MiB) plus a small replicated table and the MLPs.
ALLOTMENT = 80 * MIB
PLAN = (ROW_WISE, ROW_WISE, REPLICATED)
ROWS = (400_000, 400_000, 1_000)


def weight(state: dict[str, Any], j: int) -> torch.Tensor:
    tensor: torch.Tensor = state[f"embeddings.{j}.weight"]
    return tensor


def sparse_state(optim_state: dict[str, Any], j: int, key: str = "sum") -> torch.Tensor:
    tensor: torch.Tensor = optim_state["sparse"]["state"][j][key]
    return tensor


@pytest.fixture(scope="module")
def row_wise(tmp_path_factory: pytest.TempPathFactory) -> tuple[ShardingRun, list[dict[str, Any]]]:
    """Two row-wise trainers, each limited to ALLOTMENT, trained and checkpointed per shard."""
    tmp = tmp_path_factory.mktemp("sharding")
    run = ShardingRun(
        rows=ROWS,
        plan=PLAN,
        out=str(tmp / "out"),
        steps=5,
        allotment_bytes=ALLOTMENT,
        probe_replicated=True,
        checkpoint_dir=str(tmp / "ckpt"),
    )
    return run, spawn(run, 2)


def test_a_sharded_tables_initial_rows_are_the_replicated_tables(tmp_path: Path) -> None:
    args: dict[str, Any] = {
        "num_embeddings": [37, 5, 1000],
        "num_dense": 3,
        "embedding_dim": 4,
        "bottom_mlp": [8, 4],
        "top_mlp": [8],
    }
    whole = DLRM(**args, seed=7).state_dict()
    for world in (1, 2, 3, 6):
        shards = [
            ShardedDLRM(
                plan=[ROW_WISE, ROW_WISE, REPLICATED], rank=r, world=world, **args, seed=7
            ).state_dict()
            for r in range(world)
        ]
        for j in (0, 1):
            assert torch.equal(torch.cat([weight(s, j) for s in shards]), weight(whole, j))
        for s in shards:  # the replicated table and the MLPs: drawn after the tables, identical
            assert all(
                torch.equal(s[k], v)
                for k, v in whole.items()
                if k not in ("embeddings.0.weight", "embeddings.1.weight")
            )
    assert row_bounds(5, 6) == [0, 0, 1, 2, 3, 4, 5]  # more trainers than rows: some own none


def test_the_sharding_plan_names_bad_choices() -> None:
    assert sharding_plan({}, ["a", "b"]) == [REPLICATED, REPLICATED]
    assert sharding_plan({"b": ROW_WISE}, ["a", "b"]) == [REPLICATED, ROW_WISE]
    with pytest.raises(ValueError, match=r"model.sharding names \['c'\]"):
        sharding_plan({"c": ROW_WISE}, ["a", "b"])
    with pytest.raises(ValueError, match=r"model\.sharding\.a"):
        sharding_plan({"a": "column_wise"}, ["a", "b"])
    assert (
        type(
            build_model(
                [REPLICATED],
                0,
                1,
                num_embeddings=[4],
                num_dense=1,
                embedding_dim=2,
                bottom_mlp=[2],
                top_mlp=[2],
            )
        )
        is DLRM
    )


def test_one_row_wise_trainer_is_one_shard_and_trains_like_a_replicated_one(tmp_path: Path) -> None:
    run = ShardingRun(rows=(500, 300), plan=(ROW_WISE, REPLICATED), out=str(tmp_path), steps=3)
    models = []
    for plan in (run.plan, (REPLICATED, REPLICATED)):
        model = build_model(plan, 0, 1, **run.model_args())
        train(model, Optimizers(model), Group(), run)
        models.append(model.state_dict())
    assert isinstance(build_model(run.plan, 0, 1, **run.model_args()).embeddings[0], RowWiseTable)
    for key, value in models[1].items():
        torch.testing.assert_close(models[0][key], value, rtol=1e-5, atol=1e-6)


def test_two_row_wise_trainers_under_an_allotment_the_tables_exceed_match_the_replicated_model(
    row_wise: tuple[ShardingRun, list[dict[str, Any]]],
) -> None:
    run, trainers = row_wise
    # The allotment: the whole tables do not fit in it, a trainer's shards and the dense part do.
    reference = DLRM(**run.model_args())
    initial = {k: v.clone() for k, v in reference.state_dict().items()}
    assert footprint(reference).table_bytes > ALLOTMENT
    for t in trainers:
        assert t["replicated_refused"] is True  # the kernel refused the whole model in this trainer
        assert t["table_bytes"] + t["dense_bytes"] < ALLOTMENT
    # The reference: the replicated model trained on the same global batches, in the same order.
    optim = Optimizers(reference)
    train(reference, optim, Group(), ShardingRun(**{**run.__dict__, "allotment_bytes": None}))
    expected = reference.state_dict()
    for j, choice in enumerate(PLAN):
        if choice == ROW_WISE:
            bounds = row_bounds(ROWS[j], 2)
            assert [weight(t["model"], j).shape[0] for t in trainers] == [bounds[1], bounds[2] - bounds[1]]
            got = torch.cat([weight(t["model"], j) for t in trainers])
            sums = torch.cat([sparse_state(t["optim"], j) for t in trainers])
            torch.testing.assert_close(sums, sparse_state(optim.state_dict(), j), rtol=1e-5, atol=1e-6)
        else:
            got = weight(trainers[0]["model"], j)
            assert torch.equal(got, weight(trainers[1]["model"], j))  # replicated: identical
        assert not torch.equal(expected[f"embeddings.{j}.weight"], initial[f"embeddings.{j}.weight"])
        torch.testing.assert_close(got, weight(expected, j), rtol=1e-5, atol=1e-6)
    for key, value in expected.items():
        if not key.startswith("embeddings."):
            assert not torch.equal(value, initial[key])  # trained
            for t in trainers:
                torch.testing.assert_close(t["model"][key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("world", "plan"), [(1, PLAN), (3, PLAN), (1, (REPLICATED, REPLICATED, REPLICATED))])
def test_a_two_shard_checkpoint_resumes_on_another_trainer_count_with_identical_parameters(
    row_wise: tuple[ShardingRun, list[dict[str, Any]]], world: int, plan: tuple[Sharding, ...]
) -> None:
    run, trainers = row_wise
    assert run.checkpoint_dir is not None
    store = CheckpointStore(Path(run.checkpoint_dir))
    assert [p.name for p in sorted(store.directory.iterdir())] == [
        store.path_for(run.steps).name,
        *(shard_path(store.directory, run.steps, r, 2).name for r in range(2)),
    ]
    found = store.latest()
    assert found is not None
    step, state = found
    resumed = []
    for rank in range(world):
        model = build_model(plan, rank, world, **run.model_args())
        optim = Optimizers(model)
        load_model_state(model, optim, state, store, step)
        resumed.append((model.state_dict(), optim.state_dict()))
    for j in range(len(ROWS)):
        if plan[j] == ROW_WISE:
            got = torch.cat([weight(m, j) for m, _ in resumed])
            sums = torch.cat([sparse_state(o, j) for _, o in resumed])
        else:
            got, sums = weight(resumed[0][0], j), sparse_state(resumed[0][1], j)
        if PLAN[j] == ROW_WISE:
            want = torch.cat([weight(t["model"], j) for t in trainers])
            want_sums = torch.cat([sparse_state(t["optim"], j) for t in trainers])
        else:
            want, want_sums = weight(trainers[0]["model"], j), sparse_state(trainers[0]["optim"], j)
        assert torch.equal(got, want) and torch.equal(sums, want_sums)
        step_counts = {float(sparse_state(o, j, "step")) for _, o in resumed}
        assert step_counts == {float(run.steps)}
    for model_state, optim_state in resumed:
        for key, value in trainers[0]["model"].items():
            if not key.startswith("embeddings."):
                assert torch.equal(model_state[key], value)
        assert optim_state["dense"]["state"].keys() == trainers[0]["optim"]["dense"]["state"].keys()


def test_a_missing_shard_is_an_error_naming_it(
    row_wise: tuple[ShardingRun, list[dict[str, Any]]], tmp_path: Path
) -> None:
    run, _ = row_wise
    assert run.checkpoint_dir is not None
    copy = tmp_path / "ckpt"
    shutil.copytree(run.checkpoint_dir, copy)
    store = CheckpointStore(copy)
    shard_path(copy, run.steps, 1, 2).unlink()
    found = store.latest()
    assert found is not None
    model = build_model(PLAN, 0, 1, **run.model_args())
    with pytest.raises(CheckpointError, match=r"written by 2 trainers.*shard-001-of-002\.pt is missing"):
        load_model_state(model, Optimizers(model), found[1], store, found[0])


def test_a_row_wise_table_sums_bags_like_an_embedding_bag() -> None:
    generator = torch.Generator().manual_seed(1)
    bag = embedding_table(50, 4, generator)
    table = RowWiseTable(50, 4, 0, 1, bag.weight.detach().clone())
    ids, offsets = torch.tensor([3, 7, 7, 49, 0]), torch.tensor([0, 2, 2, 4])  # an empty bag too
    torch.testing.assert_close(table(ids, offsets), bag(ids, offsets))
    table(ids, offsets).sum().backward()
    bag(ids, offsets).sum().backward()
    assert table.weight.grad is not None and table.weight.grad.is_sparse
    assert bag.weight.grad is not None
    torch.testing.assert_close(table.weight.grad.to_dense(), bag.weight.grad.to_dense())


def test_a_model_kind_with_row_wise_tables_keeps_its_interaction_and_draws() -> None:
    """A kind's interaction (DCN-v2's cross network) and row-wise tables compose: one shard of a
    world of one holds the replicated model's rows and scores as it does."""
    from airflow_provider_primus.training.dcn_v2 import DCNv2
    from airflow_provider_primus.training.sharding import ShardedDLRM, build_model

    args: dict[str, Any] = {
        "num_embeddings": [10, 20],
        "num_dense": 2,
        "embedding_dim": 4,
        "bottom_mlp": [8, 4],
        "top_mlp": [8],
        "seed": 1,
        "dense_transform": "log1p",
        "cross_layers": 2,
        "cross_rank": None,
    }
    sharded = build_model(["row_wise", "replicated"], 0, 1, kind="dcn_v2", **args)
    whole = build_model(["replicated", "replicated"], 0, 1, kind="dcn_v2", **args)
    assert isinstance(sharded, ShardedDLRM) and isinstance(sharded, DCNv2) and type(whole) is DCNv2
    assert list(sharded.state_dict()) == list(whole.state_dict())
    pairs = zip(sharded.state_dict().values(), whole.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    sparse, dense = torch.tensor([[1, 2], [9, 19]]), torch.tensor([[0.5, 3.0], [float("nan"), 1.0]])
    with torch.no_grad():
        assert torch.equal(sharded(sparse, dense), whole(sparse, dense))
