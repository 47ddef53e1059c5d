"""Optimizers: choices, the per-step learning-rate scale, and state that resumes identically."""

from __future__ import annotations

import copy

import pytest
import torch

from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.optim import Optimizers

# torch's Adagrad warns, once per process, that it builds sparse tensors without invariant checks.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
    pytest.mark.usefixtures("one_thread"),
]


def make_model(seed: int = 0) -> DLRM:
    return DLRM(num_embeddings=[30, 10], num_dense=2, embedding_dim=4, bottom_mlp=[4], top_mlp=[6], seed=seed)


def batch(seed: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sparse = torch.stack(
        [torch.randint(0, 30, (n,), generator=g), torch.randint(0, 10, (n,), generator=g)], 1
    )
    return sparse, torch.randn(n, 2, generator=g), torch.randint(0, 2, (n,), generator=g).float()


def train_step(model: DLRM, optimizers: Optimizers, seed: int, lr_scale: float = 1.0) -> None:
    sparse, dense, labels = batch(seed)
    optimizers.zero_grad()
    torch.nn.functional.binary_cross_entropy_with_logits(model(sparse, dense), labels).backward()
    optimizers.step(lr_scale)


def dense_update(lr_scale: float) -> list[torch.Tensor]:
    model = make_model()
    before = [p.detach().clone() for p in model.dense_parameters()]
    train_step(model, Optimizers(model, dense="sgd", dense_lr=0.1), seed=1, lr_scale=lr_scale)
    return [p.detach() - b for p, b in zip(model.dense_parameters(), before, strict=True)]


def test_lr_scale_scales_the_applied_learning_rate() -> None:
    once, twice = dense_update(1.0), dense_update(2.0)
    assert any(d.abs().sum() > 0 for d in once)
    for a, b in zip(once, twice, strict=True):
        torch.testing.assert_close(b, 2 * a)


def test_lr_scale_sets_group_rates_from_the_base_rates() -> None:
    model = make_model()
    optimizers = Optimizers(model, sparse="sparse_adam", sparse_lr=0.2, dense="adagrad", dense_lr=0.01)
    train_step(model, optimizers, seed=1, lr_scale=0.5)
    train_step(model, optimizers, seed=2, lr_scale=0.5)  # not compounded: base * scale each step
    assert optimizers.sparse is not None
    assert [g["lr"] for g in optimizers.sparse.param_groups] == [0.1]
    assert [g["lr"] for g in optimizers.dense.param_groups] == [0.005]
    with pytest.raises(ValueError):
        optimizers.step(-1.0)
    with pytest.raises(ValueError, match="dense_lr_scale"):
        optimizers.step(1.0, dense_lr_scale=float("nan"))
    # A dense scale of its own (a stream's dense multiplier): the sparse side keeps lr_scale.
    optimizers.zero_grad()
    optimizers.step(0.5, dense_lr_scale=0.1)
    assert [g["lr"] for g in optimizers.sparse.param_groups] == [0.1]
    assert [g["lr"] for g in optimizers.dense.param_groups] == [pytest.approx(0.001)]


@pytest.mark.parametrize(
    ("sparse", "dense"), [("adagrad", "adam"), ("sparse_adam", "adagrad"), ("adagrad", "sgd")]
)
def test_state_round_trip_reproduces_the_next_steps(sparse: str, dense: str) -> None:
    model = make_model()
    optimizers = Optimizers(model, sparse=sparse, dense=dense)
    for seed in range(3):
        train_step(model, optimizers, seed)
    # A checkpoint: copies, so later steps of the original cannot alias into it.
    model_state = copy.deepcopy(model.state_dict())
    optimizer_state = copy.deepcopy(optimizers.state_dict())

    resumed = make_model(seed=42)
    resumed.load_state_dict(model_state)
    resumed_optimizers = Optimizers(resumed, sparse=sparse, dense=dense)
    resumed_optimizers.load_state_dict(optimizer_state)
    for seed in range(3, 6):
        train_step(model, optimizers, seed, lr_scale=0.7)
        train_step(resumed, resumed_optimizers, seed, lr_scale=0.7)
    for a, b in zip(model.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_unknown_names_list_the_choices() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="adagrad, sparse_adam"):
        Optimizers(model, sparse="adam")
    with pytest.raises(ValueError, match="adam, adagrad, sgd"):
        Optimizers(model, dense="rmsprop")
    with pytest.raises(ValueError, match="sparse_lr"):
        Optimizers(model, sparse_lr=0.0)


def test_state_of_other_optimizers_is_refused() -> None:
    model = make_model()
    state = Optimizers(model, sparse="sparse_adam").state_dict()
    with pytest.raises(ValueError, match="sparse_adam"):
        Optimizers(model, sparse="adagrad").load_state_dict(state)


def test_model_without_sparse_features_has_no_sparse_optimizer() -> None:
    model = DLRM(num_embeddings=[], num_dense=3, embedding_dim=4, bottom_mlp=[4], top_mlp=[4])
    optimizers = Optimizers(model)
    assert optimizers.sparse is None
    optimizers.zero_grad()
    model(torch.empty(5, 0, dtype=torch.long), torch.randn(5, 3)).sum().backward()
    optimizers.step()
    Optimizers(model).load_state_dict(optimizers.state_dict())
