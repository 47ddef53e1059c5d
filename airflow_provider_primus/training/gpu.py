"""The trainer's GPU path: where the model's parts live, how a step's rows reach them, which backend
the trainers' process group uses.

**Placement.** The dense layers (bottom and top MLPs) always go to the GPU when the trainer has one:
they are small and do the arithmetic. The embedding tables go with them when they fit in the GPU's
free memory next to the dense part and a reserve for activations and the allocator's workspace;
otherwise they stay in host memory (lookups and their sparse updates on the CPU, the pooled vectors
copied to the GPU), so a model whose tables outgrow the GPU still trains — slower, never out of
memory halfway through. :func:`place` decides from the byte counts alone (tested with given memory
figures), :func:`placement_for` measures them (``torch.cuda.mem_get_info``).

**Batches.** A step's rows arrive from the data plane as host tensors. :class:`BatchStager`
concatenates them straight into pinned (page-locked) host memory and copies them with
``non_blocking=True`` on a copy stream of its own; the compute stream waits for that copy *on the
GPU* (a CUDA event), so neither the host nor the GPU blocks on a transfer, and the copy of one step
overlaps whatever the GPU still computes of the previous one. :class:`Prefetcher` goes one batch
further ahead where the batches are known in advance (evaluation, benchmarks): batch k+1 is staged
before batch k is handed out. On a CPU trainer both are plain concatenation and iteration: the same
code path, which is how the test suite covers them without a GPU.

**Process group.** gloo on CPU. On GPU the group is ``cpu:gloo,cuda:nccl``: NCCL for CUDA tensors
(the dense gradients), gloo for the step's small control vector, the object collectives and the
embeddings' sparse gradients, which NCCL cannot all-reduce (:func:`all_reduce_sparse`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from airflow_provider_primus.data.bags import Bag, concat_bags
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.dlrm import device_for
from airflow_provider_primus.training.trainable import Trainable

__all__ = [
    "BatchStager",
    "Footprint",
    "Placement",
    "Prefetcher",
    "Staged",
    "all_reduce_sparse",
    "footprint",
    "place",
    "place_model",
    "placement_for",
    "process_group_backend",
    "trainer_device",
]

GLOO = "gloo"
NCCL_WITH_GLOO = "cpu:gloo,cuda:nccl"
MIB = 2**20
# Kept free on the GPU for activations, the allocator's workspace and fragmentation: a tenth of the
# card, and never less than 512 MiB (a step's activations at batch 4096 are tens of MiB).
RESERVE_SHARE = 0.10
RESERVE_MIN = 512 * MIB
# Optimizer state per parameter, in parameters (Adagrad's sum; Adam's two moments).
OPTIMIZER_STATES = {"adagrad": 1, "sparse_adam": 2, "adam": 2, "sgd": 0}


def process_group_backend(device_type: str) -> str:
    """The trainers' ``torch.distributed`` backend for a trainer on ``device_type``."""
    return NCCL_WITH_GLOO if device_type == "cuda" else GLOO


def trainer_device(choice: str, rank: int = 0, gpus: int | None = None) -> torch.device:
    """The training spec's ``device`` for trainer ``rank``: with several GPUs visible (several
    trainers on one machine), trainer r takes GPU ``r % gpus``; a pod that sees one GPU takes it."""
    device = device_for(choice)
    if device.type != "cuda":
        return device
    count = torch.cuda.device_count() if gpus is None else gpus
    if count < 1:
        raise RuntimeError("the training spec asks for device 'cuda' but torch sees no GPU")
    return torch.device("cuda", rank % count)


@dataclass(frozen=True)
class Footprint:
    """Bytes the model's parts take in training: parameters, gradients and optimizer state."""

    table_bytes: int  # embedding tables + their optimizer state (their gradients are sparse: small)
    dense_bytes: int  # MLPs + dense gradients + their optimizer state


def footprint(
    model: Trainable, sparse_optimizer: str = "adagrad", dense_optimizer: str = "adam"
) -> Footprint:
    tables = sum(p.numel() * p.element_size() for p in model.embedding_parameters())
    dense = sum(p.numel() * p.element_size() for p in model.dense_parameters())
    return Footprint(
        table_bytes=tables * (1 + OPTIMIZER_STATES.get(sparse_optimizer, 2)),
        dense_bytes=dense * (2 + OPTIMIZER_STATES.get(dense_optimizer, 2)),
    )


@dataclass(frozen=True)
class Placement:
    """Where the dense layers and the embedding tables live, and why (for the log and the result)."""

    dense: torch.device
    embeddings: torch.device
    reason: str

    @property
    def gpu(self) -> bool:
        return self.dense.type == "cuda"

    def to_dict(self) -> dict[str, Any]:
        return {"dense": str(self.dense), "embeddings": str(self.embeddings), "reason": self.reason}


def place(device: torch.device, need: Footprint, free_bytes: int, total_bytes: int) -> Placement:
    """The placement on ``device`` given the model's footprint and the GPU's free and total memory
    (``torch.cuda.mem_get_info``); a CPU device places everything on the host."""
    host = torch.device("cpu")
    if device.type != "cuda":
        return Placement(host, host, "no GPU: the whole model on the host")
    budget = free_bytes - max(int(total_bytes * RESERVE_SHARE), RESERVE_MIN)
    figures = (
        f"tables {need.table_bytes / MIB:.0f} MiB, dense {need.dense_bytes / MIB:.0f} MiB, "
        f"GPU free {free_bytes / MIB:.0f} MiB of {total_bytes / MIB:.0f} MiB, usable {budget / MIB:.0f} MiB"
    )
    if need.dense_bytes > budget:
        return Placement(host, host, f"the GPU has no room even for the dense layers: {figures}")
    if need.dense_bytes + need.table_bytes <= budget:
        return Placement(device, device, f"the whole model fits on the GPU: {figures}")
    return Placement(device, host, f"embedding tables too large for the GPU, kept on the host: {figures}")


def placement_for(
    model: Trainable, device: torch.device, sparse_optimizer: str, dense_optimizer: str
) -> Placement:
    """:func:`place` with the GPU's memory measured now (before the model is moved to it)."""
    need = footprint(model, sparse_optimizer, dense_optimizer)
    if device.type != "cuda":
        return place(device, need, 0, 0)
    free, total = torch.cuda.mem_get_info(device)
    return place(device, need, free, total)


def place_model(model: Trainable, placement: Placement) -> Trainable:
    """Move the dense layers and the tables to their devices. The tables move separately, so tables
    that stay on the host are never copied to the GPU on the way (they would not fit)."""
    for name, child in model.named_children():
        child.to(placement.embeddings if name == "embeddings" else placement.dense)
    for name, buffer in list(model.named_buffers(recurse=False)):
        setattr(model, name, buffer.to(placement.dense))
    return model


@dataclass
class Staged:
    """A step's rows on their devices; ``ready()`` before using them on the compute stream."""

    sparse: torch.Tensor
    dense: torch.Tensor
    labels: torch.Tensor
    copied: Any = None  # torch.cuda.Event once the copy stream has copied them, else None
    # The multi-hot columns, beside the tables (read them after ``ready()``).
    bags: dict[str, Bag] = field(default_factory=dict)

    def ready(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.copied is not None:
            stream = torch.cuda.current_stream(self.labels.device)
            stream.wait_event(self.copied)  # the GPU waits for the copy; the host goes on
            bag_tensors = [t for b in self.bags.values() for t in (b.ids, b.offsets)]
            for t in (self.sparse, self.dense, self.labels, *bag_tensors):
                if t.is_cuda:
                    t.record_stream(stream)  # allocated on the copy stream, used on this one
            self.copied = None
        return self.sparse, self.dense, self.labels


def _pinned_cat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    rows = sum(t.shape[0] for t in tensors)
    out = torch.empty((rows, *tensors[0].shape[1:]), dtype=tensors[0].dtype, pin_memory=True)
    return torch.cat(list(tensors), out=out)


class BatchStager:
    """Host batches to device tensors: pinned memory, non-blocking copies on a copy stream."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.stream: Any = torch.cuda.Stream(placement.dense) if placement.gpu else None  # type: ignore[no-untyped-call]

    def stage(self, parts: Sequence[tuple[str, TensorBatch]]) -> Staged:
        batches = [b for _, b in parts]
        # One bag per multi-hot column over the step's parts (none: the dict is empty, no work).
        bags = {k: concat_bags([b.bags[k] for b in batches]) for k in batches[0].bags} if batches else {}
        if self.stream is None:
            return Staged(
                torch.cat([b.sparse for b in batches]),
                torch.cat([b.dense for b in batches]),
                torch.cat([b.labels for b in batches]),
                bags=bags,
            )
        host = [_pinned_cat([getattr(b, k) for b in batches]) for k in ("sparse", "dense", "labels")]
        with torch.cuda.stream(self.stream):
            sparse = host[0].to(self.placement.embeddings, non_blocking=True)
            dense = host[1].to(self.placement.dense, non_blocking=True)
            labels = host[2].to(self.placement.dense, non_blocking=True)
            placed = {
                k: Bag(
                    _pinned_cat([b.ids]).to(self.placement.embeddings, non_blocking=True),
                    _pinned_cat([b.offsets]).to(self.placement.embeddings, non_blocking=True),
                )
                for k, b in bags.items()
            }
            copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copied.record(self.stream)
        return Staged(sparse, dense, labels, copied, placed)


class Prefetcher(Iterator[Staged]):
    """Stages the batches of ``steps`` one ahead: when batch k is handed out, batch k+1 is already
    on its way to the device. Takes from ``steps`` at most one step before it is asked for."""

    def __init__(self, steps: Iterable[Sequence[tuple[str, TensorBatch]]], stager: BatchStager) -> None:
        self._steps = iter(steps)
        self._stager = stager
        self._ahead: Staged | None = None
        self._started = self._done = False

    def _stage_next(self) -> None:
        parts = next(self._steps, None)
        if parts is None:
            self._ahead, self._done = None, True
        else:
            self._ahead = self._stager.stage(parts)

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Staged:
        if not self._started:
            self._started = True
            self._stage_next()
        if self._ahead is None:
            raise StopIteration
        current = self._ahead
        if not self._done:
            self._stage_next()
        return current


def all_reduce_sparse(grad: torch.Tensor) -> torch.Tensor:
    """Sum a sparse gradient over the trainers. NCCL has no sparse all-reduce, so a GPU trainer's
    (small: the rows a step touched) goes through gloo on the host and back."""
    if not grad.is_cuda:
        dist.all_reduce(grad)
        return grad
    host = grad.cpu()
    dist.all_reduce(host)
    return host.to(grad.device, non_blocking=True)
