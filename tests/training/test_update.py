"""The update's learning rates per source: a stream moves the dense layers at a tenth of their rate
in ``mixed`` mode (unless its control says otherwise) and the embeddings at the full rate; in
``stream`` mode, and for history and its replays, both move at the full rate."""

from __future__ import annotations

import pytest
import torch

from airflow_provider_primus.contracts.training import STREAM_DENSE_LR_MULTIPLIER, SourceControl
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.control import LocalStep, StepControl
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.feeds.replay import REPLAY_SUFFIX
from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.summary import TrainMetrics
from airflow_provider_primus.training.update import SourceWeights, Updater

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
    pytest.mark.usefixtures("one_thread"),
]

STREAMS = frozenset({"events"})


def weights(mode: str, **controls: SourceControl) -> SourceWeights:
    return SourceWeights(mode, STREAMS, controls)


def test_a_stream_moves_the_dense_layers_a_tenth_as_fast_in_mixed_mode_only() -> None:
    mixed = weights("mixed")
    assert mixed.dense_lr_multiplier("events") == STREAM_DENSE_LR_MULTIPLIER == 0.1
    assert mixed.lr_multiplier("events") == 1.0  # the embeddings: full rate
    assert mixed.dense_lr_multiplier("history") == 1.0
    assert mixed.dense_lr_multiplier("history" + REPLAY_SUFFIX) == 1.0
    # Stream mode: the stream is all the dense layers learn from.
    assert weights("stream").dense_lr_multiplier("events") == 1.0


def test_a_source_control_sets_the_dense_rate_on_top_of_its_learning_rate() -> None:
    set_both = weights(
        "mixed",
        events=SourceControl(lr_multiplier=2.0, dense_lr_multiplier=1.0),
        history=SourceControl(lr_multiplier=0.5, dense_lr_multiplier=0.2),
    )
    assert set_both.dense_lr_multiplier("events") == 2.0
    assert set_both.dense_lr_multiplier("history") == pytest.approx(0.1)
    # Only the learning rate set: the stream's dense default applies on top of it.
    rate_only = weights("mixed", events=SourceControl(lr_multiplier=3.0))
    assert rate_only.dense_lr_multiplier("events") == pytest.approx(3.0 * STREAM_DENSE_LR_MULTIPLIER)
    with pytest.raises(ValueError, match="greater than 0"):
        SourceControl(dense_lr_multiplier=0.0)


def rows(n: int, seed: int) -> TensorBatch:
    g = torch.Generator().manual_seed(seed)
    sparse = torch.stack(
        [torch.randint(0, 30, (n,), generator=g), torch.randint(0, 10, (n,), generator=g)], 1
    )
    return TensorBatch(
        sparse=sparse,
        dense=torch.randn(n, 2, generator=g),
        labels=torch.randint(0, 2, (n,), generator=g).float(),
    )


def one_step(
    weighing: SourceWeights, parts: list[tuple[str, TensorBatch]]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The change one step makes to the dense and to the embedding parameters (SGD on the dense side,
    so the change is proportional to the rate)."""
    model = DLRM(num_embeddings=[30, 10], num_dense=2, embedding_dim=4, bottom_mlp=[4], top_mlp=[6], seed=0)
    optim = Optimizers(model, dense="sgd", dense_lr=0.1)
    updater = Updater(
        model,
        optim,
        Group(),
        torch.device("cpu"),
        weighing,
        scores=ScoreLog(),
        freshness=Percentiles(seed=0),
        metrics=TrainMetrics(),
        clock_ms=lambda: 0,
    )
    dense = [p.detach().clone() for p in model.dense_parameters()]
    sparse = [p.detach().clone() for p in model.embedding_parameters()]
    updater.step(parts)
    return (
        [p.detach() - b for p, b in zip(model.dense_parameters(), dense, strict=True)],
        [p.detach() - b for p, b in zip(model.embedding_parameters(), sparse, strict=True)],
    )


def test_a_mixed_step_of_stream_rows_moves_the_dense_layers_at_a_tenth_and_the_embeddings_fully() -> None:
    batch = rows(64, seed=1)
    mixed_dense, mixed_sparse = one_step(weights("mixed"), [("events", batch)])
    stream_dense, stream_sparse = one_step(weights("stream"), [("events", batch)])
    assert any(d.abs().sum() > 0 for d in stream_dense)
    for m, s in zip(mixed_dense, stream_dense, strict=True):
        torch.testing.assert_close(m, STREAM_DENSE_LR_MULTIPLIER * s)
    for m, s in zip(mixed_sparse, stream_sparse, strict=True):
        torch.testing.assert_close(m, s)


def test_a_step_of_history_and_stream_rows_scales_the_dense_rate_by_the_row_weighted_mean() -> None:
    history, events = rows(48, seed=2), rows(16, seed=3)
    parts = [("history", history), ("events", events)]
    scale = (48 * 1.0 + 16 * STREAM_DENSE_LR_MULTIPLIER) / 64
    mixed_dense, _ = one_step(weights("mixed"), parts)
    full_rate = weights("mixed", events=SourceControl(dense_lr_multiplier=1.0))
    full_dense, _ = one_step(full_rate, parts)
    assert any(d.abs().sum() > 0 for d in full_dense)
    for m, f in zip(mixed_dense, full_dense, strict=True):
        torch.testing.assert_close(m, scale * f)
    # What the trainers agree on before the step carries the same sum, through the all-reduce's vector.
    step = LocalStep(
        active=["history", "events"], parts=parts, mix=None, guard=False, lag=0, age=0.0, now=0.0
    )
    control = StepControl.of(step, weights("mixed"), checkpoint_due=False, publish_due=False)
    assert control.trained_rows == 64 and control.lr_weighted == 64
    assert control.dense_lr_weighted == pytest.approx(64 * scale)
    assert StepControl.from_vector(control.to_vector()) == control
