"""Data parallelism across trainer processes with torch.distributed (gloo on CPU; NCCL on GPU).

Every trainer holds a full replica. Each step all trainers exchange one small control vector (the
``StepControl`` record of ``control.py``: who still has data, rows trained, learning-rate weights,
whether rank 0 wants a checkpoint), then sum their gradients — dense ones and the embeddings' sparse
ones — so every replica applies the same update: the mean loss over the *global* step, whatever
each trainer's share of it was. A trainer whose sources are finished keeps joining with zero
gradients until every trainer is done.

With one trainer every method is the identity and nothing is initialised, so the single-process
runtime pays nothing for this.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from airflow_provider_primus.training.gpu import all_reduce_sparse

__all__ = ["Group"]


class Group:
    def __init__(
        self, rank: int = 0, world: int = 1, init_method: str | None = None, backend: str = "gloo"
    ) -> None:
        """``backend``: gloo, or on GPU trainers gpu.process_group_backend's NCCL with gloo."""
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        self.rank, self.world = rank, world
        if world > 1:
            if init_method is None:
                raise ValueError("more than one trainer needs an init method (tcp://host:port)")
            dist.init_process_group(
                backend, init_method=init_method, rank=rank, world_size=world, timeout=timedelta(minutes=10)
            )

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over trainers (float64, so row counts stay exact)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def sum_gradients(self, model: torch.nn.Module) -> None:
        """Sum every parameter's gradient over trainers; a missing one counts as zero."""
        if self.world == 1:
            return
        for module in model.modules():
            if isinstance(module, torch.nn.EmbeddingBag) and module.sparse:
                weight = module.weight
                if weight.grad is None:
                    weight.grad = torch.sparse_coo_tensor(
                        torch.empty((1, 0), dtype=torch.int64, device=weight.device),
                        torch.empty((0, weight.shape[1]), dtype=weight.dtype, device=weight.device),
                        weight.shape,
                    )
                weight.grad = all_reduce_sparse(weight.grad)
        for param in model.parameters():
            if param.grad is not None and param.grad.is_sparse:
                continue
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad)

    def gather(self, obj: Any) -> list[Any]:
        """Every trainer's ``obj``, in rank order, on every trainer."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every trainer."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
