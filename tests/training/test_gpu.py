"""The GPU path's decisions and mechanics, on a CPU-only machine.

What needs no GPU is tested here directly: the process group's backend, which GPU a trainer takes,
where the model's parts go for given memory figures, how the parts are moved (onto torch's ``meta``
device, which stands for a second device: the tables stay on the host while the dense layers move,
and a forward pass crosses between them), the stager's exactness and the prefetcher's order. What
needs a GPU (pinned memory, the copy stream, NCCL, the measured utilisation) is what
``scripts/gpu_bench.py`` runs where one is lent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.dlrm import DLRM
from airflow_provider_primus.training.gpu import (
    MIB,
    RESERVE_MIN,
    BatchStager,
    Footprint,
    Placement,
    Prefetcher,
    footprint,
    place,
    place_model,
    placement_for,
    process_group_backend,
    trainer_device,
)

GPU = torch.device("cuda", 0)  # a device object only: nothing here touches a GPU
HOST = torch.device("cpu")
GIB = 1024 * MIB


def model(tables: tuple[int, ...] = (100, 200, 300), dim: int = 8) -> DLRM:
    return DLRM(num_embeddings=tables, num_dense=4, embedding_dim=dim, bottom_mlp=[16, dim], top_mlp=[8])


def batch(start: int, rows: int = 3) -> TensorBatch:
    ids = torch.arange(start, start + rows)
    return TensorBatch(
        sparse=torch.stack([ids % 100, ids % 200, ids % 300], dim=1),
        dense=torch.arange(start * 4, (start + rows) * 4, dtype=torch.float32).reshape(rows, 4),
        labels=(ids % 2).float(),
    )


def test_the_process_group_is_gloo_on_cpu_and_nccl_with_gloo_on_gpu() -> None:
    assert process_group_backend("cpu") == "gloo"
    # NCCL for CUDA tensors; gloo for the control vector, object collectives and sparse gradients.
    assert process_group_backend("cuda") == "cpu:gloo,cuda:nccl"


def test_each_trainer_on_a_machine_takes_its_own_gpu() -> None:
    assert trainer_device("cpu", rank=3) == HOST
    assert [trainer_device("cuda", rank=r, gpus=2) for r in range(4)] == [
        torch.device("cuda", i) for i in (0, 1, 0, 1)
    ]
    assert trainer_device("cuda", rank=5, gpus=1) == GPU  # a pod that sees one GPU
    with pytest.raises(RuntimeError, match="torch sees no GPU"):
        trainer_device("cuda", rank=0, gpus=0)
    assert trainer_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_the_footprint_counts_parameters_gradients_and_optimizer_state() -> None:
    m = model()
    tables = (100 + 200 + 300) * 8 * 4
    dense = sum(p.numel() for p in m.dense_parameters()) * 4
    assert footprint(m, "adagrad", "adam") == Footprint(table_bytes=tables * 2, dense_bytes=dense * 4)
    assert footprint(m, "sparse_adam", "sgd") == Footprint(table_bytes=tables * 3, dense_bytes=dense * 2)


def test_placement_for_given_memory_figures() -> None:
    need = Footprint(table_bytes=6 * GIB, dense_bytes=1 * GIB)
    # A CPU trainer: everything on the host, whatever the figures.
    assert place(HOST, need, 0, 0) == Placement(HOST, HOST, "no GPU: the whole model on the host")
    # A large GPU: all of it there.
    whole = place(GPU, need, free_bytes=70 * GIB, total_bytes=80 * GIB)
    assert (whole.dense, whole.embeddings) == (GPU, GPU) and "fits" in whole.reason
    # A small one: the dense layers on the GPU, the tables on the host.
    split = place(GPU, need, free_bytes=6 * GIB, total_bytes=8 * GIB)
    assert (split.dense, split.embeddings) == (GPU, HOST)
    assert "tables 6144 MiB, dense 1024 MiB, GPU free 6144 MiB of 8192 MiB" in split.reason
    # A GPU already full: nothing there.
    assert place(GPU, need, free_bytes=1 * GIB, total_bytes=8 * GIB).dense == HOST
    # The reserve: a tenth of the card, at least 512 MiB, is never planned for the model.
    total = 80 * GIB
    exact = 7 * GIB + total // 10
    assert place(GPU, need, exact, total).embeddings == GPU
    assert place(GPU, need, exact - 1, total).embeddings == HOST
    small = 7 * GIB + RESERVE_MIN
    assert place(GPU, need, small, 2 * GIB).embeddings == GPU
    assert place(GPU, need, small - 1, 2 * GIB).embeddings == HOST


def test_placement_on_a_cpu_trainer_measures_nothing() -> None:
    assert placement_for(model(), HOST, "adagrad", "adam").to_dict() == {
        "dense": "cpu",
        "embeddings": "cpu",
        "reason": "no GPU: the whole model on the host",
    }


def test_tables_kept_on_the_host_while_the_dense_layers_move() -> None:
    m = model()
    reference = m(batch(0).sparse, batch(0).dense)
    other = torch.device("meta")  # a second device that needs no GPU
    place_model(m, Placement(dense=other, embeddings=HOST, reason="split"))
    devices = {name.split(".")[0]: p.device for name, p in m.named_parameters()}
    assert devices == {"embeddings": HOST, "bottom": other, "top": other}
    assert m.pair_rows.device == other and m.pair_cols.device == other
    # The forward pass looks the IDs up where the tables are and hands the pooled vectors over.
    logits = m(batch(0).sparse, batch(0).dense.to(other))
    assert logits.device == other and logits.shape == reference.shape


def test_the_stager_on_a_cpu_trainer_is_exact_concatenation() -> None:
    parts = [("history", batch(0)), ("clicks", batch(10, rows=2)), ("history", batch(20))]
    staged = BatchStager(Placement(HOST, HOST, "cpu")).stage(parts)
    assert staged.copied is None  # nothing to wait for
    sparse, dense, labels = staged.ready()
    assert torch.equal(sparse, torch.cat([b.sparse for _, b in parts]))
    assert torch.equal(dense, torch.cat([b.dense for _, b in parts]))
    assert torch.equal(labels, torch.cat([b.labels for _, b in parts]))


def test_the_prefetcher_hands_out_every_step_in_order_one_ahead() -> None:
    taken: list[int] = []

    def steps() -> Iterator[list[tuple[str, TensorBatch]]]:
        for k in range(5):
            taken.append(k)
            yield [("history", batch(10 * k)), ("history", batch(10 * k + 3, rows=1))]

    prefetcher = Prefetcher(steps(), BatchStager(Placement(HOST, HOST, "cpu")))
    assert taken == []  # nothing staged before the first step is asked for
    seen = []
    for k, staged in enumerate(prefetcher):
        assert taken == list(range(min(k + 2, 5)))  # this step and the next one, no further
        _, dense, labels = staged.ready()
        expected = torch.cat([batch(10 * k).dense, batch(10 * k + 3, rows=1).dense])
        assert torch.equal(dense, expected)
        seen.append(labels.shape[0])
    assert seen == [4] * 5
    with pytest.raises(StopIteration):
        next(prefetcher)
    assert list(Prefetcher(iter([]), BatchStager(Placement(HOST, HOST, "cpu")))) == []
