"""A published snapshot served from its own manifest: the model it records, dense transform
included, scores raw rows exactly as the model that was published; a snapshot without the record
is refused with what to do instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from airflow_provider_primus.training.checkpoints.served import model_record, served_model
from airflow_provider_primus.training.checkpoints.snapshots import Publisher, latest_snapshot
from airflow_provider_primus.training.dlrm import DENSE_TRANSFORMS, DLRM

ARGS: dict[str, Any] = {
    "num_embeddings": [40, 9],
    "num_dense": 2,
    "embedding_dim": 4,
    "bottom_mlp": [8, 4],
    "top_mlp": [8],
}


def raw_rows(n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    sparse = torch.stack([torch.randint(0, 40, (n,), generator=g), torch.randint(0, 9, (n,), generator=g)], 1)
    dense = torch.randn(n, 2, generator=g) * 10.0 ** torch.randint(0, 6, (n, 2), generator=g)
    dense[1, 0], dense[2, 1] = float("nan"), float("inf")
    return sparse, dense


@pytest.mark.parametrize("transform", DENSE_TRANSFORMS)
def test_a_served_snapshot_scores_raw_rows_as_the_published_model(tmp_path: Path, transform: str) -> None:
    args: dict[str, Any] = {**ARGS, "seed": 7, "dense_transform": transform}
    model = DLRM(**args)
    record = model_record(args, ["user", "item"], ["price", "count"])
    assert record["dense_transform"] == transform and "seed" not in record
    Publisher(tmp_path).publish(model.state_dict(), {"model": record})
    snapshot = latest_snapshot(tmp_path)
    assert snapshot is not None
    served = served_model(snapshot)
    assert served.dense_transform == transform and not served.training
    sparse, dense = raw_rows()
    with torch.no_grad():
        assert torch.equal(served(sparse, dense), model(sparse, dense))
        # The other transform, same weights: different scores, so the record is what decides.
        other = DLRM(**{**args, "dense_transform": next(t for t in DENSE_TRANSFORMS if t != transform)})
        other.load_state_dict(snapshot.load_state())
        assert not torch.allclose(other(sparse, dense), model(sparse, dense))


def test_a_snapshot_without_a_model_record_is_refused(tmp_path: Path) -> None:
    Publisher(tmp_path).publish(DLRM(**ARGS).state_dict(), {"step": 3})
    snapshot = latest_snapshot(tmp_path)
    assert snapshot is not None
    with pytest.raises(
        ValueError, match=r"model version 1: .* lacks \['num_embeddings'.*dense_transform included"
    ):
        served_model(snapshot)


def test_a_dcn_v2_snapshot_is_served_as_the_cross_network_it_records(tmp_path: Path) -> None:
    from airflow_provider_primus.training.dcn_v2 import DCNv2

    args: dict[str, Any] = {**ARGS, "seed": 7, "dense_transform": "log1p", "cross_layers": 2, "cross_rank": 3}
    model = DCNv2(**args)
    record = model_record(args, ["user", "item"], ["price", "count"], "dcn_v2")
    assert (record["type"], record["cross_layers"], record["cross_rank"]) == ("dcn_v2", 2, 3)
    Publisher(tmp_path).publish(model.state_dict(), {"model": record})
    snapshot = latest_snapshot(tmp_path)
    assert snapshot is not None
    served = served_model(snapshot)
    assert isinstance(served, DCNv2)
    sparse, dense = raw_rows()
    with torch.no_grad():
        assert torch.equal(served(sparse, dense), model.eval()(sparse, dense))


def test_a_record_without_a_type_is_a_dlrm_and_an_unknown_type_is_refused(tmp_path: Path) -> None:
    from airflow_provider_primus.training.model_kinds import UnknownModelKindError

    args: dict[str, Any] = {**ARGS, "seed": 7, "dense_transform": "log1p"}
    record = model_record(args, ["user", "item"], ["price", "count"])
    del record["type"]  # published before model kinds were recorded
    Publisher(tmp_path / "old").publish(DLRM(**args).state_dict(), {"model": record})
    old = latest_snapshot(tmp_path / "old")
    assert old is not None and type(served_model(old)) is DLRM
    Publisher(tmp_path / "new").publish(DLRM(**args).state_dict(), {"model": {**record, "type": "mamba"}})
    new = latest_snapshot(tmp_path / "new")
    assert new is not None
    with pytest.raises(
        UnknownModelKindError, match="unknown model type 'mamba'; this version builds dlrm, dcn_v2"
    ):
        served_model(new)
