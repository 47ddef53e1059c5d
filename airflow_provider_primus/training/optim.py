"""The optimizer pair a DLRM trains with: one for the sparse-gradient embeddings, one for the rest.

Embedding gradients are sparse, which only some torch optimizers accept (Adagrad, SparseAdam), and
the MLPs want the usual dense choices; one object steps both so the trainer sees a single optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.trainable import Trainable

__all__ = ["DENSE_OPTIMIZERS", "SPARSE_OPTIMIZERS", "Optimizers"]

_Factory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]

SPARSE_OPTIMIZERS: dict[str, _Factory] = {
    "adagrad": lambda params, lr: torch.optim.Adagrad(params, lr=lr),
    "sparse_adam": lambda params, lr: torch.optim.SparseAdam(list(params), lr=lr),
}
DENSE_OPTIMIZERS: dict[str, _Factory] = {
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "adagrad": lambda params, lr: torch.optim.Adagrad(params, lr=lr),
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
}


def _choose(kind: str, name: str, choices: dict[str, _Factory]) -> _Factory:
    try:
        return choices[name]
    except KeyError:
        raise ValueError(f"unknown {kind} optimizer {name!r}; choose one of {', '.join(choices)}") from None


class Optimizers:
    """Steps the sparse and the dense optimizer together, at a learning rate scaled per step.

    Base learning rates come from the constructor, not from a loaded state: a restart with a changed
    configuration trains at the configured rate while keeping the optimizers' accumulated moments.
    """

    def __init__(
        self,
        model: Trainable,
        *,
        sparse: str = "adagrad",
        sparse_lr: float = 0.05,
        dense: str = "adam",
        dense_lr: float = 1e-3,
    ) -> None:
        sparse_factory = _choose("sparse", sparse, SPARSE_OPTIMIZERS)
        dense_factory = _choose("dense", dense, DENSE_OPTIMIZERS)
        for name, lr in (("sparse_lr", sparse_lr), ("dense_lr", dense_lr)):
            if not (math.isfinite(lr) and lr > 0):
                raise ValueError(f"{name} must be a positive number, got {lr}")
        self.sparse_name = sparse
        self.dense_name = dense
        self.sparse_lr = sparse_lr
        self.dense_lr = dense_lr
        embedding_params = model.embedding_parameters()
        # torch refuses an empty parameter list; a model without sparse features has no sparse side.
        self.sparse: torch.optim.Optimizer | None = (
            sparse_factory(embedding_params, sparse_lr) if embedding_params else None
        )
        # Likewise a model of tables alone (a user's factorization machine, say) has no dense side.
        dense_params = model.dense_parameters()
        self.dense: torch.optim.Optimizer | None = (
            dense_factory(dense_params, dense_lr) if dense_params else None
        )

    def _pairs(self) -> list[tuple[torch.optim.Optimizer, float]]:
        pairs = [(self.sparse, self.sparse_lr), (self.dense, self.dense_lr)]
        return [(optimizer, lr) for optimizer, lr in pairs if optimizer is not None]

    def zero_grad(self) -> None:
        # set_to_none: accumulating into an existing sparse gradient would coalesce on every step.
        for optimizer, _ in self._pairs():
            optimizer.zero_grad(set_to_none=True)

    def step(self, lr_scale: float = 1.0, dense_lr_scale: float | None = None) -> None:
        """One update at ``base lr * lr_scale``: how a source's learning-rate multiplier applies;
        the dense optimizer at ``dense_lr_scale`` instead when given (a stream's dense multiplier)."""
        dense_scale = lr_scale if dense_lr_scale is None else dense_lr_scale
        for name, scale in (("lr_scale", lr_scale), ("dense_lr_scale", dense_scale)):
            if not (math.isfinite(scale) and scale >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {scale}")
        for optimizer, base_lr in self._pairs():
            scale = dense_scale if optimizer is self.dense else lr_scale
            for group in optimizer.param_groups:
                group["lr"] = base_lr * scale
            optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {
            "sparse_name": self.sparse_name,
            "dense_name": self.dense_name,
            "sparse": None if self.sparse is None else self.sparse.state_dict(),
            "dense": None if self.dense is None else self.dense.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Another optimizer's state would load without complaint and be silently misread.
        saved = (state["sparse_name"], state["dense_name"])
        if saved != (self.sparse_name, self.dense_name):
            raise ValueError(
                f"state is for sparse={saved[0]!r}, dense={saved[1]!r}; "
                f"these optimizers are sparse={self.sparse_name!r}, dense={self.dense_name!r}"
            )
        if (state["sparse"] is None) != (self.sparse is None):
            raise ValueError("state and model disagree on whether the model has sparse features")
        if (state["dense"] is None) != (self.dense is None):
            raise ValueError("state and model disagree on whether the model has dense parameters")
        if self.sparse is not None:
            self.sparse.load_state_dict(state["sparse"])
        if self.dense is not None:
            self.dense.load_state_dict(state["dense"])
