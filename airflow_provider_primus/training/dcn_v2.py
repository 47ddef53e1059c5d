"""DCN-v2: the DLRM's embeddings and bottom MLP, with a cross network in place of the dot interaction.

The anchor is the MLPerf DLRM-dcnv2 reference (Wang et al., "DCN V2", WWW 2021): the bottom MLP's
output and every pooled embedding are concatenated into ``x0`` (width ``F * d``), each cross layer
computes ``x_{l+1} = x0 * (W_l x_l + b_l) + x_l``, and the top MLP maps the last ``x`` to one logit.
The dot interaction sees only pairwise products; the cross layers learn bounded-degree feature
crosses (degree ``l + 1`` after ``l`` layers) with weights, which is why the reference moved to it.

``cross_rank`` makes each ``W_l`` low-rank (``U_l V_l^T``, the reference's 512 for its 3,456-wide
input): the cost per layer falls from ``(F d)^2`` to ``2 r F d``. Left unset, ``W_l`` is full-rank,
the right choice while ``F d`` is a few hundred, as in this product's default schema.

Everything else is DLRM's: the sparse/dense parameter split (the cross layers are dense), the dense
transform, the tables' devices and the hook through which row-wise sharding builds its own rows.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from airflow_provider_primus.training.dlrm import DLRM

__all__ = ["CROSS_LAYERS", "CrossNetwork", "DCNv2"]

CROSS_LAYERS = 3  # the reference's depth


def _glorot(rows: int, cols: int, generator: torch.Generator) -> nn.Parameter:
    weight = torch.empty(rows, cols)
    weight.normal_(0.0, math.sqrt(2.0 / (rows + cols)), generator=generator)
    return nn.Parameter(weight)


class CrossNetwork(nn.Module):
    """``layers`` cross layers over inputs of ``width``, full-rank or of rank ``rank``."""

    def __init__(self, width: int, layers: int, rank: int | None, generator: torch.Generator) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"the cross network needs inputs, got width {width}")
        if layers < 1:
            raise ValueError(f"cross_layers must be >= 1, got {layers}")
        if rank is not None and not 1 <= rank <= width:
            raise ValueError(f"cross_rank must be in 1..{width} (the input width), got {rank}")
        self.width = width
        self.rank = rank
        # Drawn in layer order, U before V: a seed gives the same network on every trainer.
        self.u = nn.ParameterList()
        self.v = nn.ParameterList()
        for _ in range(layers):
            if rank is None:
                self.u.append(_glorot(width, width, generator))
            else:
                self.u.append(_glorot(width, rank, generator))
                self.v.append(_glorot(rank, width, generator))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(width)) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for k, bias in enumerate(self.bias):
            # Row vectors: x W^T; low-rank: (x V^T) U^T.
            mixed = x @ self.u[k].t() if self.rank is None else (x @ self.v[k].t()) @ self.u[k].t()
            x = x0 * (mixed + bias) + x
        return x


class DCNv2(DLRM):
    """A :class:`DLRM` whose interaction is a :class:`CrossNetwork` of ``cross_layers`` layers
    (``cross_rank``: low-rank, or None for full-rank); every other argument is DLRM's."""

    def __init__(
        self, *, cross_layers: int = CROSS_LAYERS, cross_rank: int | None = None, **dlrm: Any
    ) -> None:
        # Read by the interaction hooks during DLRM.__init__, before nn.Module's bookkeeping exists.
        object.__setattr__(self, "_cross", (cross_layers, cross_rank))
        super().__init__(**dlrm)

    def _top_width(self, n_features: int, num_dense: int, embedding_dim: int) -> int:
        del num_dense
        return n_features * embedding_dim

    def _make_interaction(self, n_features: int, generator: torch.Generator) -> None:
        layers, rank = self.__dict__["_cross"]
        self.cross = CrossNetwork(n_features * self.embedding_dim, layers, rank, generator)

    def _interact(self, features: list[torch.Tensor], bottom_out: torch.Tensor | None) -> torch.Tensor:
        del bottom_out  # already the first of ``features``
        out: torch.Tensor = self.cross(torch.cat(features, dim=1))
        return out
