"""DCN-v2: the cross layer's formula, full- and low-rank, the DLRM parts it keeps (the sparse/dense
split, seeded determinism, sparse gradients), its own errors, and that it learns a feature cross
the dot interaction's pairwise products see only indirectly."""

from __future__ import annotations

import pytest
import torch

from airflow_provider_primus.training.dcn_v2 import CROSS_LAYERS, CrossNetwork, DCNv2
from airflow_provider_primus.training.metrics import auc
from airflow_provider_primus.training.optim import Optimizers
from tests.training.conftest import id_batch

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
    pytest.mark.usefixtures("one_thread"),
]

TABLES = [16, 16, 7]


def make_model(seed: int = 0, num_dense: int = 3, **cross: int | None) -> DCNv2:
    return DCNv2(
        num_embeddings=TABLES,
        num_dense=num_dense,
        embedding_dim=8,
        bottom_mlp=[16, 8] if num_dense else [],
        top_mlp=[16, 8],
        seed=seed,
        **cross,  # type: ignore[arg-type]
    )


def batch(n: int, seed: int, num_dense: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return id_batch(TABLES, n, seed, num_dense)


def test_one_cross_layer_is_x0_times_w_x0_plus_b_plus_x0() -> None:
    net = CrossNetwork(5, 1, None, torch.Generator().manual_seed(0))
    with torch.no_grad():
        net.bias[0].copy_(torch.arange(5.0))
    x0 = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    expected = x0 * (x0 @ net.u[0].t() + net.bias[0]) + x0
    assert torch.allclose(net(x0), expected)


def test_a_low_rank_layer_is_u_times_v_and_has_fewer_weights() -> None:
    low = CrossNetwork(40, 2, 4, torch.Generator().manual_seed(0))
    full = CrossNetwork(40, 2, None, torch.Generator().manual_seed(0))
    x0 = torch.randn(3, 40, generator=torch.Generator().manual_seed(2))
    w = [low.u[k] @ low.v[k] for k in range(2)]
    x = x0
    for k in range(2):
        x = x0 * (x @ w[k].t() + low.bias[k]) + x
    assert torch.allclose(low(x0), x, atol=1e-5)
    assert sum(p.numel() for p in low.parameters()) < sum(p.numel() for p in full.parameters()) / 4


def test_output_shape_split_and_the_cross_layers_are_dense_parameters() -> None:
    model = make_model()
    sparse, dense = batch(13, seed=1)
    logits = model(sparse, dense)
    assert logits.shape == (13,) and logits.dtype == torch.float32
    assert len(model.cross.bias) == CROSS_LAYERS
    assert model.cross.width == (len(TABLES) + 1) * 8  # the bottom output beside every embedding
    split = model.embedding_parameters() + model.dense_parameters()
    assert {id(p) for p in split} == {id(p) for p in model.parameters()}
    assert len(split) == len(list(model.parameters()))
    cross = {id(p) for p in model.cross.parameters()}
    assert cross <= {id(p) for p in model.dense_parameters()}
    logits.sum().backward()
    assert all(p.grad is not None and p.grad.is_sparse for p in model.embedding_parameters())
    assert all(p.grad is not None and not p.grad.is_sparse for p in model.cross.parameters())


def test_same_seed_same_model_and_global_rng_untouched() -> None:
    rng_before = torch.random.get_rng_state()
    a, b, c = make_model(seed=4), make_model(seed=4), make_model(seed=5)
    assert torch.equal(rng_before, torch.random.get_rng_state())
    sparse, dense = batch(32, seed=2)
    assert torch.equal(a(sparse, dense), b(sparse, dense))
    assert not torch.equal(a(sparse, dense), c(sparse, dense))
    restored = make_model(seed=9)
    restored.load_state_dict(a.state_dict())
    assert torch.equal(restored(sparse, dense), a(sparse, dense))


def test_one_sparse_feature_and_no_dense_ones_is_a_model() -> None:
    """The dot interaction needs two features to have a pair; the cross network crosses one with
    itself."""
    model = DCNv2(num_embeddings=[10], num_dense=0, embedding_dim=4, bottom_mlp=[], top_mlp=[8])
    assert model(torch.tensor([[1], [2]]), torch.zeros(2, 0)).shape == (2,)


@pytest.mark.parametrize(
    ("cross", "message"),
    [
        ({"cross_layers": 0}, "cross_layers must be >= 1"),
        ({"cross_rank": 0}, r"cross_rank must be in 1\.\.32"),
        ({"cross_rank": 33}, r"cross_rank must be in 1\.\.32"),
    ],
)
def test_bad_cross_settings_are_refused_by_name(cross: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_model(**cross)


@pytest.mark.parametrize("rank", [None, 8])
def test_learns_a_label_that_is_a_cross_of_two_ids(rank: int | None) -> None:
    """Clicks where table 0's and table 1's IDs have the same parity: neither ID alone says anything."""
    model = make_model(seed=1, cross_rank=rank)
    optimizers = Optimizers(model, sparse="adagrad", dense="adam", dense_lr=1e-2)
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def labels(sparse: torch.Tensor) -> torch.Tensor:
        return (sparse[:, 0] % 2 == sparse[:, 1] % 2).float()

    for step in range(300):
        sparse, dense = batch(64, seed=100 + step)
        optimizers.zero_grad()
        loss_fn(model(sparse, dense), labels(sparse)).backward()
        optimizers.step()
    sparse, dense = batch(2000, seed=1)
    with torch.no_grad():
        scores = torch.sigmoid(model(sparse, dense))
    assert auc(labels(sparse).numpy(), scores.numpy()) > 0.9
