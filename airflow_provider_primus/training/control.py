"""The one agreement trainers reach before each step: who is still active, the step's rows, the
loss and learning-rate weights, whether rank 0's timers (or any trainer's savepoint) call for a
checkpoint or a snapshot, and whether any trainer was asked to stop there for a regroup.

Every trainer contributes its own record, made from what it brings to the step (``LocalStep``); the
element-wise sum over trainers (``Group.sum``, one all-reduce of a short float64 vector) is what each
of them then acts on, so all take the same decisions. With one trainer the sum is the record itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.feeds.mixer import StepPlan
from airflow_provider_primus.training.update import SourceWeights

__all__ = ["LocalStep", "StepControl", "StepTimers"]


@dataclass
class LocalStep:
    """What this trainer brings to a step before the trainers agree on it."""

    active: list[str]  # feeds not exhausted
    parts: list[tuple[str, TensorBatch]]  # the rows taken, per source
    mix: StepPlan | None  # the mixer's plan (None when no feed is active)
    guard: bool  # the freshness guard held history back
    lag: int
    age: float
    now: float  # monotonic, when the rows were taken: the timers' and the elapsed time's clock


@dataclass(frozen=True)
class StepControl:
    """Summed over trainers, each field counts: trainers still active, rows in the step, rows trained
    on, rows weighted by their learning-rate multiplier, by their dense one and by their loss weight,
    and whether the leader wants a checkpoint / a published snapshot after this step (rank 0's timers;
    any trainer's savepoint), and whether the trainers stop at that checkpoint (the master regroups
    them)."""

    active: float
    rows: float
    trained_rows: float
    lr_weighted: float
    dense_lr_weighted: float
    loss_weighted: float
    checkpoint_due: float
    publish_due: float
    stop: float = 0.0

    def to_vector(self) -> list[float]:
        """The fields in declaration order: the all-reduce's wire format."""
        return [float(v) for v in astuple(self)]

    @classmethod
    def from_vector(cls, values: Sequence[float]) -> StepControl:
        if len(values) != len(fields(cls)):
            raise ValueError(f"a step control vector has {len(fields(cls))} elements, got {len(values)}")
        return cls(*(float(v) for v in values))

    @classmethod
    def of(
        cls,
        step: LocalStep,
        weights: SourceWeights,
        *,
        checkpoint_due: bool,
        publish_due: bool,
        stop: bool = False,
    ) -> StepControl:
        """This trainer's record for ``step`` (``*_due``: this trainer's timers, the leader's count)."""
        trained = [
            (weights.lr_multiplier(n), weights.dense_lr_multiplier(n), weights.loss_weight(n), len(b))
            for n, b in step.parts
            if weights.trains_on(n)
        ]
        return cls(
            active=float(bool(step.active)),
            rows=float(sum(len(b) for _, b in step.parts)),
            trained_rows=float(sum(r for *_, r in trained)),
            lr_weighted=float(sum(m * r for m, _, _, r in trained)),
            dense_lr_weighted=float(sum(d * r for _, d, _, r in trained)),
            loss_weighted=float(sum(w * r for _, _, w, r in trained)),
            checkpoint_due=float(checkpoint_due or stop),
            publish_due=float(publish_due),
            stop=float(stop),
        )


@dataclass
class StepTimers:
    """When the run started, and when this trainer last checkpointed, published and reported: rank
    0's timers decide, in the step's agreement, whether the group checkpoints or publishes."""

    started: float
    elapsed_before: float  # a resumed run's elapsed time so far
    checkpoint: float
    publish: float
    progress: float
