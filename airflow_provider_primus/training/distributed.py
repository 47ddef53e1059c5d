"""Data parallelism across trainer processes with torch.distributed (gloo on CPU; NCCL on GPU).

Every trainer holds a full replica. Each step all trainers exchange one small control vector (the
``StepControl`` record of ``control.py``: who still has data, rows trained, learning-rate weights,
whether rank 0 wants a checkpoint), then sum their gradients — dense ones and the embeddings' sparse
ones — so every replica applies the same update: the mean loss over the *global* step, whatever
each trainer's share of it was. A trainer whose sources are finished keeps joining with zero
gradients until every trainer is done.

With one trainer every method is the identity and nothing is initialised, so the single-process
runtime pays nothing for this.

Two ways to meet: ``primus train --trainers N`` gives every process the same ``tcp://`` address it
chose; a job's trainers ``meet`` through their master instead (its data service relays the address):
the leader opens a TCPStore on a port the system picks, on the address the job advertises (loopback
locally, the pod's IP in a cluster), and publishes it for its generation of the group.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store, TCPStore  # what torch.distributed re-exports

from airflow_provider_primus.training.gpu import all_reduce_sparse

__all__ = ["Group"]

log = logging.getLogger(__name__)


TIMEOUT = timedelta(minutes=10)
DRAIN_TIMEOUT = timedelta(seconds=60)  # how long a finished trainer waits for the others to finish


class Group:
    def __init__(
        self,
        rank: int = 0,
        world: int = 1,
        init_method: str | None = None,
        *,
        store: Store | None = None,
        backend: str = "gloo",
    ) -> None:
        """``backend``: gloo, or on GPU trainers gpu.process_group_backend's NCCL with gloo."""
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        self.rank, self.world = rank, world
        self.comm_s = 0.0  # seconds spent in collectives (``primus bench train-scale``'s share)
        self._store = store  # kept: the leader's store serves the group for its whole life
        if world > 1:
            if init_method is None and store is None:
                raise ValueError("more than one trainer needs an init method (tcp://host:port) or a store")
            dist.init_process_group(
                backend, init_method=init_method, store=store, rank=rank, world_size=world, timeout=TIMEOUT
            )

    @classmethod
    def meet(
        cls,
        rank: int,
        world: int,
        *,
        host: str,
        advertise: str | None = None,
        publish: Callable[[str], None],
        lookup: Callable[[], str | None],
        backend: str = "gloo",
        timeout_s: float = TIMEOUT.total_seconds(),
    ) -> Group:
        """Form the group through a relay: the leader's TCPStore listens on ``host`` and it publishes
        ``advertise:port`` (``advertise`` defaults to ``host``; a wildcard bind must name the address
        peers dial), the others ``lookup`` until it is there (raising if their generation is
        superseded)."""
        if world == 1:
            return cls()
        if rank == 0:
            store = TCPStore(host, 0, world, True, timeout=TIMEOUT, wait_for_workers=False)
            publish(f"{advertise or host}:{store.port}")
        else:
            deadline = time.monotonic() + timeout_s
            while (address := lookup()) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no leader published the trainer group's address in {timeout_s:.0f}s")
                time.sleep(0.1)
            where, port = address.rsplit(":", 1)
            store = TCPStore(where, int(port), world, False, timeout=TIMEOUT)
        return cls(rank, world, store=store, backend=backend)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.comm_s += time.perf_counter() - started

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over trainers (float64, so row counts stay exact)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor(list(values), dtype=torch.float64)
        with self._timed():
            dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def sum_gradients(self, model: torch.nn.Module) -> None:
        """Sum every parameter's gradient over trainers; a missing one counts as zero."""
        if self.world == 1:
            return
        with self._timed():
            self._sum_gradients(model)

    def _sum_gradients(self, model: torch.nn.Module) -> None:
        for module in model.modules():
            if isinstance(module, torch.nn.EmbeddingBag | torch.nn.Embedding) and module.sparse:
                weight = module.weight
                if weight.grad is None:
                    weight.grad = torch.sparse_coo_tensor(
                        torch.empty((1, 0), dtype=torch.int64, device=weight.device),
                        torch.empty((0, weight.shape[1]), dtype=weight.dtype, device=weight.device),
                        weight.shape,
                    )
                weight.grad = all_reduce_sparse(weight.grad)
        # The dense gradients travel as one flat buffer per device and dtype: one all-reduce per
        # step instead of one per parameter (each is a round trip, and on shared cores a wait for
        # the other trainer to be scheduled).
        buckets: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for param in model.parameters():
            if param.grad is not None and param.grad.is_sparse:
                continue
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            buckets.setdefault((param.grad.device, param.grad.dtype), []).append(param.grad)
        for grads in buckets.values():
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            offset = 0
            for g in grads:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()

    def gather(self, obj: Any) -> list[Any]:
        """Every trainer's ``obj``, in rank order, on every trainer."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        with self._timed():
            dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every trainer."""
        if self.world == 1:
            return obj
        box = [obj]
        with self._timed():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.world > 1:
            with self._timed():
                dist.barrier()

    def close(self, *, drain: bool = True) -> None:
        """Leave the group. ``drain`` (a clean end): first meet the others at a barrier, so no
        trainer tears its connections down while a peer's last collective still reads them (gloo
        then aborts the process: "terminate called without an active exception"). A failed trainer
        leaves at once; a peer that never arrives costs the others ``DRAIN_TIMEOUT``, not a hang."""
        if self.world == 1 or not dist.is_initialized():
            return
        if drain:
            try:
                dist.monitored_barrier(timeout=DRAIN_TIMEOUT)
            except Exception as exc:  # a peer that failed or left: leave anyway
                log.warning("leaving the trainer group without the others: %s", exc)
        dist.destroy_process_group()
