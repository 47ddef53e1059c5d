"""DLRM: shapes, seeded determinism, the dense transform and NaN dense input, sparse embedding
gradients, and that it learns."""

from __future__ import annotations

import math
from typing import get_args

import pytest
import torch

from airflow_provider_primus.contracts.training import DenseTransform, Model
from airflow_provider_primus.training.dlrm import DENSE_TRANSFORMS, DLRM, dense_input
from airflow_provider_primus.training.metrics import auc
from airflow_provider_primus.training.optim import Optimizers
from tests.training.conftest import id_batch

# torch's Adagrad warns, once per process, that it builds sparse tensors without invariant checks.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
    pytest.mark.usefixtures("one_thread"),
]

TABLES = [50, 20, 7]


def make_model(seed: int = 0, num_dense: int = 3, dense_transform: str = "log1p") -> DLRM:
    return DLRM(
        num_embeddings=TABLES,
        num_dense=num_dense,
        embedding_dim=8,
        bottom_mlp=[16, 8],
        top_mlp=[16, 8],
        seed=seed,
        dense_transform=dense_transform,
    )


def batch(n: int, seed: int, num_dense: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return id_batch(TABLES, n, seed, num_dense)


def test_output_shape_and_split_covers_every_parameter() -> None:
    model = make_model()
    sparse, dense = batch(13, seed=1)
    logits = model(sparse, dense)
    assert logits.shape == (13,) and logits.dtype == torch.float32
    assert model(sparse[:0], dense[:0]).shape == (0,)
    split = model.embedding_parameters() + model.dense_parameters()
    assert len(split) == len(list(model.parameters()))
    assert {id(p) for p in split} == {id(p) for p in model.parameters()}
    assert len(model.embedding_parameters()) == len(TABLES)


def test_same_seed_same_model_and_global_rng_untouched() -> None:
    rng_before = torch.random.get_rng_state()
    a, b, c = make_model(seed=4), make_model(seed=4), make_model(seed=5)
    assert torch.equal(rng_before, torch.random.get_rng_state())
    sparse, dense = batch(32, seed=2)
    assert torch.equal(a(sparse, dense), b(sparse, dense))
    assert not torch.equal(a(sparse, dense), c(sparse, dense))
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)


def test_log1p_is_signed_and_none_leaves_values_as_they_are() -> None:
    raw = torch.tensor([[0.0, 1.0, -1.0, math.e - 1, -(math.e**3 - 1), 1e30, -0.25]])
    expected = torch.tensor([[0.0, math.log(2), -math.log(2), 1.0, -3.0, 30 * math.log(10), -math.log(1.25)]])
    assert torch.allclose(dense_input(raw, "log1p"), expected)
    assert torch.equal(dense_input(raw, "none"), raw)
    small = torch.tensor([[1e-7, -1e-7]])
    assert torch.allclose(dense_input(small, "log1p"), small, rtol=1e-6)  # slope 1 at 0: no dead zone
    for transform in DENSE_TRANSFORMS:  # nulls (NaN) and infinities are the neutral 0 either way
        assert torch.equal(
            dense_input(torch.tensor([[math.nan, math.inf, -math.inf]]), transform), torch.zeros(1, 3)
        )
    # The model's choices and default are the contract's.
    assert get_args(DenseTransform) == DENSE_TRANSFORMS
    assert DENSE_TRANSFORMS[0] == Model().dense_transform == "log1p"


def test_the_model_applies_its_dense_transform_and_only_it() -> None:
    sparse, dense = batch(16, seed=6)
    dense = dense * 1000  # raw, heavy values: a price in cents, a count
    transformed = make_model(dense_transform="log1p")
    raw = make_model(dense_transform="none")
    assert torch.equal(transformed(sparse, dense), raw(sparse, dense_input(dense, "log1p")))
    assert not torch.allclose(transformed(sparse, dense), raw(sparse, dense))
    assert make_model().dense_transform == "log1p"  # the default


def test_an_unknown_dense_transform_is_refused() -> None:
    with pytest.raises(ValueError, match=r"dense_transform must be one of \['log1p', 'none'\], got 'log'"):
        make_model(dense_transform="log")
    with pytest.raises(ValueError, match="got 'zscore'"):
        dense_input(torch.zeros(1, 1), "zscore")


@pytest.mark.parametrize("transform", DENSE_TRANSFORMS)
def test_nan_and_inf_dense_values_count_as_zero(transform: str) -> None:
    model = make_model(dense_transform=transform)
    sparse, dense = batch(8, seed=3)
    dense[0, 1] = float("nan")
    dense[3, 0] = float("inf")
    dense[5, 2] = float("-inf")
    zeroed = dense.clone()
    zeroed[0, 1] = zeroed[3, 0] = zeroed[5, 2] = 0.0
    logits = model(sparse, dense)
    assert torch.isfinite(logits).all()
    assert torch.equal(logits, model(sparse, zeroed))


def test_embedding_gradients_are_sparse_and_dense_ones_are_not() -> None:
    model = make_model()
    sparse, dense = batch(16, seed=4)
    model(sparse, dense).sum().backward()
    for p in model.embedding_parameters():
        assert p.grad is not None and p.grad.is_sparse
    for p in model.dense_parameters():
        assert p.grad is not None and not p.grad.is_sparse


def test_bottom_width_must_match_embedding_dim() -> None:
    with pytest.raises(ValueError, match=r"bottom_mlp.*\(4\).*embedding_dim \(8\)"):
        DLRM(num_embeddings=[10], num_dense=2, embedding_dim=8, bottom_mlp=[16, 4], top_mlp=[4])
    with pytest.raises(ValueError, match="at least one layer"):
        DLRM(num_embeddings=[10], num_dense=2, embedding_dim=8, bottom_mlp=[], top_mlp=[4])
    with pytest.raises(ValueError, match="at least two"):
        DLRM(num_embeddings=[10], num_dense=0, embedding_dim=8, bottom_mlp=[], top_mlp=[4])


def test_shape_mismatch_is_reported() -> None:
    model = make_model()
    sparse, dense = batch(4, seed=5)
    with pytest.raises(ValueError, match="sparse"):
        model(sparse[:, :2], dense)
    with pytest.raises(ValueError, match="dense"):
        model(sparse, dense[:, :1])
    with pytest.raises(ValueError, match="rows"):
        model(sparse, dense[:3])


def test_without_dense_features() -> None:
    # bottom_mlp is ignored without dense features, so a shared config need not change.
    model = DLRM(num_embeddings=TABLES, num_dense=0, embedding_dim=8, bottom_mlp=[16, 4], top_mlp=[8])
    assert model.bottom is None
    sparse, _ = batch(10, seed=6)
    logits = model(sparse, torch.empty(10, 0))
    assert logits.shape == (10,)
    logits.sum().backward()
    assert all(p.grad is not None and p.grad.is_sparse for p in model.embedding_parameters())


@pytest.mark.parametrize("sparse_optimizer", ["adagrad", "sparse_adam"])
def test_learns_a_label_that_depends_on_a_sparse_id(sparse_optimizer: str) -> None:
    # Half of table 0's IDs are "clicky"; the other features are noise.
    clicky = torch.randperm(TABLES[0], generator=torch.Generator().manual_seed(0))[: TABLES[0] // 2]
    is_clicky = torch.zeros(TABLES[0], dtype=torch.bool)
    is_clicky[clicky] = True
    model = make_model(seed=1)
    optimizers = Optimizers(model, sparse=sparse_optimizer, dense="adam", dense_lr=1e-2)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for step in range(200):
        sparse, dense = batch(64, seed=100 + step)
        labels = is_clicky[sparse[:, 0]].float()
        optimizers.zero_grad()
        loss_fn(model(sparse, dense), labels).backward()
        optimizers.step()
    sparse, dense = batch(2000, seed=1)
    with torch.no_grad():
        scores = torch.sigmoid(model(sparse, dense))
    assert auc(is_clicky[sparse[:, 0]].float().numpy(), scores.numpy()) > 0.9
