"""One step's update: score the rows, then train on those the mode trains on.

Stream rows are scored *before* the update that trains on them (progressive validation), whatever
the mode. The loss is the weighted mean over the *global* step (all trainers); the learning rates
scale by the row-weighted mean of the sources' multipliers, the dense layers' by their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from airflow_provider_primus.contracts.schema import EventTime
from airflow_provider_primus.contracts.training import STREAM_DENSE_LR_MULTIPLIER, SourceControl
from airflow_provider_primus.data.bags import Bag
from airflow_provider_primus.data.event_time import implausible, iso, now_ms, unit_hint
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.feeds.replay import is_replay, replayed_source
from airflow_provider_primus.training.gpu import BatchStager, Placement, Staged
from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.sharding import exchanges_rows
from airflow_provider_primus.training.summary import TrainMetrics
from airflow_provider_primus.training.trainable import Trainable

log = logging.getLogger(__name__)

__all__ = ["SourceWeights", "Updater"]


@dataclass(frozen=True)
class SourceWeights:
    """How a source's rows count in an update: trained on or only scored, and with what loss weight
    and learning-rate multiplier (the training spec's ``mixing.sources``)."""

    mode: str
    streams: frozenset[str]  # the stream (Kafka) sources' names
    controls: Mapping[str, SourceControl]

    def trains_on(self, name: str) -> bool:
        """``batch`` mode scores the streams but never trains on them; ``stream`` mode trains on the
        streams alone (history is not even read then, but a ready-made feed could still offer it)."""
        if name in self.streams:
            return self.mode in ("stream", "mixed")
        if is_replay(name):  # history replayed while the stream trains
            return self.mode == "mixed"
        return self.mode in ("batch", "mixed")

    def loss_weight(self, name: str) -> float:
        control = self.controls.get(replayed_source(name))
        return control.loss_weight if control else 1.0

    def lr_multiplier(self, name: str) -> float:
        control = self.controls.get(replayed_source(name))
        return control.lr_multiplier if control else 1.0

    def dense_lr_multiplier(self, name: str) -> float:
        """The rate at which the source's rows move the dense layers, relative to their base rate:
        ``lr_multiplier`` times the source's dense multiplier (by default ``STREAM_DENSE_LR_MULTIPLIER``
        for a stream in ``mixed`` mode, contracts/training.py says why; in ``stream`` mode the stream is
        all the dense layers learn from)."""
        control = self.controls.get(replayed_source(name))
        dense = control.dense_lr_multiplier if control else None
        if dense is None:
            mixed_stream = name in self.streams and self.mode == "mixed"
            dense = STREAM_DENSE_LR_MULTIPLIER if mixed_stream else 1.0
        return self.lr_multiplier(name) * dense


class Updater:
    def __init__(
        self,
        model: torch.nn.Module,
        optim: Optimizers,
        group: Group,
        device: torch.device,
        weights: SourceWeights,
        *,
        scores: ScoreLog,
        freshness: Percentiles,
        metrics: TrainMetrics,
        clock_ms: Callable[[], int],
        event_times: Mapping[str, EventTime] | None = None,
        stager: BatchStager | None = None,
    ) -> None:
        """``scores``, ``freshness`` and ``metrics`` are the trainer's own (restored in place from a
        checkpoint); ``clock_ms`` is "now" for the freshness of trained rows; ``event_times`` each
        source's event-time declaration, to name the unit that fits when its times are implausible;
        ``stager`` how a step's rows reach the model's devices (training/gpu.py; default: all on
        ``device``)."""
        self.model, self.optim, self.group, self.device = model, optim, group, device
        self.stager = stager or BatchStager(Placement(device, device, "one device"))
        self.weights = weights
        self.scores, self.freshness, self.metrics = scores, freshness, metrics
        self.clock_ms = clock_ms
        self.event_times = dict(event_times or {})
        self._warned: set[str] = set()

    def step(
        self,
        parts: list[tuple[str, TensorBatch]],
        *,
        global_trained: float | None = None,
        lr_weighted: float | None = None,
        loss_weighted: float | None = None,
        dense_lr_weighted: float | None = None,
    ) -> None:
        """Score, then update. ``global_trained``, ``lr_weighted``, ``loss_weighted`` and
        ``dense_lr_weighted`` are the step's totals over all trainers (this trainer's own rows when
        not given)."""
        w = self.weights
        trained_rows = [(n, b) for n, b in parts if w.trains_on(n)]
        local = sum(len(b) for _, b in trained_rows)
        total = local if global_trained is None else global_trained

        def row_weighted(given: float | None, per_source: Callable[[str], float]) -> float:
            """The step's total over all trainers when given, else this trainer's own rows'."""
            return sum(per_source(n) * len(b) for n, b in trained_rows) if given is None else given

        lr_sum = row_weighted(lr_weighted, w.lr_multiplier)
        dense_lr_sum = row_weighted(dense_lr_weighted, w.dense_lr_multiplier)
        weight_sum = row_weighted(loss_weighted, w.loss_weight)
        logits = None
        self.model.train()
        # Row-wise tables (training/sharding.py): every trainer takes part in every step's lookup
        # and gradient exchanges, with no rows of its own if it has none.
        collective = exchanges_rows(self.model)
        if parts or collective:
            staged = self.stager.stage(parts) if parts else self._no_rows()
            sparse, dense, labels = staged.ready()
            logits = self.model(sparse, dense, staged.bags)
            offset = 0
            # Reading scores back waits for the GPU: only when there are stream rows to score.
            scored = any(n in w.streams for n, _ in parts)
            probs = torch.sigmoid(logits.detach()).float().cpu().numpy() if scored else None
            for n, b in parts:
                if n in w.streams and probs is not None:  # progressive validation: scored before
                    self.scores.append(b.labels.numpy(), probs[offset : offset + len(b)])  # the update
                    self.metrics.rows_scored += len(b)
                offset += len(b)
        if total > 0 and weight_sum > 0:
            self.optim.zero_grad()
            if logits is not None and (local or collective):
                weights = torch.cat(
                    [
                        torch.full(
                            (len(b),), w.loss_weight(n) if w.trains_on(n) else 0.0, device=logits.device
                        )
                        for n, b in parts
                    ]
                    or [logits.new_zeros(0)]
                )
                losses = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, labels, reduction="none"
                )
                loss = (losses * weights).sum() / total
                loss.backward()  # type: ignore[no-untyped-call]
            self.group.sum_gradients(self.model)
            self.optim.step(lr_scale=lr_sum / total, dense_lr_scale=dense_lr_sum / total)
        for n, b in trained_rows:
            if b.event_time_ms is not None and len(b) and not is_replay(n):  # replays are old news
                self.metrics.watermark_ms = max(self.metrics.watermark_ms, int(b.event_time_ms.max()))
        now_ms = self.clock_ms()
        for n, b in parts:
            if w.trains_on(n) and is_replay(n):  # counted as replays, never as consumption
                source = replayed_source(n)
                self.metrics.rows_replayed[source] = self.metrics.rows_replayed.get(source, 0) + len(b)
            elif w.trains_on(n):
                self.metrics.rows_trained[n] = self.metrics.rows_trained.get(n, 0) + len(b)
                if n in w.streams and b.event_time_ms is not None:
                    age = (now_ms - b.event_time_ms.numpy()).clip(min=0) / 1000.0
                    self.freshness.add(age.astype(np.float64))
        self._check_event_times(parts)

    def _no_rows(self) -> Staged:
        """An empty step on the model's devices: a trainer without rows still joins the exchanges."""
        placement, model = self.stager.placement, cast(Trainable, self.model)
        empty = torch.zeros(0, dtype=torch.int64, device=placement.embeddings)
        return Staged(
            torch.zeros((0, model.num_sparse), dtype=torch.int64, device=placement.embeddings),
            torch.zeros((0, model.num_dense), dtype=torch.float32, device=placement.dense),
            torch.zeros(0, dtype=torch.float32, device=placement.dense),
            bags={name: Bag(empty, empty) for name in getattr(model, "bag_columns", ())},
        )

    def _check_event_times(self, parts: list[tuple[str, TensorBatch]]) -> None:
        """Count the rows used (trained or scored) whose event time is not believable, per source,
        and say once per source what would fit: a unit mix-up must show, not skew the figures."""
        wall = now_ms()  # the data's plausibility is about the real now, not a replay's clock
        for n, b in parts:
            if b.event_time_ms is None or not len(b):
                continue
            times = b.event_time_ms.numpy()
            bad = implausible(times, wall)
            if not bad:
                continue
            counts = self.metrics.event_time_implausible
            counts[n] = counts.get(n, 0) + bad
            if n not in self._warned:
                self._warned.add(n)
                log.warning("%s", self._describe(n, times, bad))

    def _describe(self, name: str, times: np.ndarray[Any, Any], bad: int) -> str:
        low, high = float(times.min()), float(times.max())
        text = (
            f"source {name!r}: {bad} of {len(times)} rows have implausible event times "
            f"({iso(low)} .. {iso(high)}; before 1990-01-01 or more than a day ahead); counted in "
            f"the figures' event_time_implausible"
        )
        declared = self.event_times.get(name)
        return text if declared is None else text + unit_hint(declared, low, high)
