"""PrimusTraining: how one model is trained from the sources a PrimusData document describes.

The data document keeps the single definition of every source (schema, transforms, mixture weights
and priorities); this contract adds only what training decides: model sizes, optimizers, the mode,
per-source update control, the freshness guard, checkpoints, publishing and evaluation. It is strict
for the same reason the data contract is, and it is checked against the data document it is used
with (``check_against``) so a source named here that the data does not define is an error up front.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, Strict, ValidationError, model_validator

from airflow_provider_primus.contracts.base import (
    ENTRYPOINT_FORM,
    BatchRows,
    BucketCount,
    ColumnName,
    KeepCount,
    Metadata,
    NonEmptyStr,
    PositiveFloat,
    PositiveInt,
    ProcessCount,
    RowCount,
    SourceName,
    StrictModel,
    ThreadCount,
    Width,
)
from airflow_provider_primus.contracts.data import PrimusData, Window, is_history
from airflow_provider_primus.contracts.errors import (
    SpecError,
    SpecIssue,
    issues_from_validation_error,
    raise_issues,
    suggest,
)
from airflow_provider_primus.contracts.schema import MultiHot
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.contracts.storage import ObjectStorage, storage_issues
from airflow_provider_primus.contracts.versions import api_version, hub_version, to_hub

API_VERSION = api_version(hub_version("PrimusTraining"))

Mode = Literal["batch", "stream", "mixed"]
Share = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]


TableSharding = Literal["replicated", "row_wise"]
DenseTransform = Literal["log1p", "none"]
ModelType = Literal["dlrm", "dcn_v2", "python"]


def _entrypoint(value: str) -> str:
    if not ENTRYPOINT_FORM.match(value):
        raise ValueError(f"expected 'package.module:factory', got {value!r}")
    return value


Entrypoint = Annotated[str, Strict(), AfterValidator(_entrypoint)]
# What only the built-in kinds read: a python model is given the schema and its options instead.
BUILT_IN_ONLY = ("bottom_mlp", "top_mlp", "dense_transform")
MAX_CROSS_LAYERS = 16
CrossLayers = Annotated[int, Strict(), Field(ge=1, le=MAX_CROSS_LAYERS)]


class Model(StrictModel):
    """Which built-in model, and its sizes.

    ``type``: ``dlrm`` (the default: embeddings, a bottom MLP for the dense values, pairwise dot
    interactions, a top MLP) or ``dcn_v2`` (the same embeddings and bottom MLP with a cross network
    of ``cross_layers`` layers in place of the dot interaction, full-rank or of rank ``cross_rank``:
    the MLPerf DLRM-dcnv2 reference's structure, training/dcn_v2.py).

    ``python`` is the user's own ``torch.nn.Module``: ``entrypoint`` names its factory
    (``package.module:factory``), called with the feature schema and ``options`` (free-form, passed as
    they are; JSON values) and held to the model protocol (training/protocol.py, docs/models.md).

    ``buckets`` overrides a sparse column's table size; by default it is the column's
    ``hash_bucket`` in the data schema, which is what bounds its IDs.

    ``sharding`` chooses, per sparse column, where its table lives when there are several trainers:
    ``replicated`` (the default: every trainer holds the whole table, gradients are all-reduced) or
    ``row_wise`` (each trainer holds a contiguous range of the rows; lookups and gradients are
    exchanged with all-to-all), for tables too large for one trainer's memory. With one trainer a
    row-wise table is one shard.

    ``dense_transform`` is what the model does to the dense values before its bottom MLP, in
    training, in the held-out evaluation and in a published snapshot alike (it is part of the model,
    training/dlrm.py): ``log1p`` (the default), ``sign(x) * log(1 + |x|)``, because raw logs are
    heavy-tailed (prices, counts) and the reference DLRM takes the log of its dense counts for that
    reason; it is stateless, so it needs no statistics of the data and does not touch checkpoints.
    ``none`` feeds the values as they are, for columns scaled upstream. Nulls and infinities are
    0 either way."""

    embedding_dim: Width = 16
    buckets: dict[ColumnName, BucketCount] = Field(default_factory=dict)
    sharding: dict[ColumnName, TableSharding] = Field(default_factory=dict)
    bottom_mlp: list[Width] = Field(default_factory=lambda: [64, 16])
    top_mlp: list[Width] = Field(default_factory=lambda: [64, 32])
    dense_transform: DenseTransform = "log1p"
    type: ModelType = "dlrm"
    cross_layers: CrossLayers | None = None  # dcn_v2 only; unset: 3, the reference's depth
    cross_rank: Width | None = None  # dcn_v2 only; unset: full-rank
    entrypoint: Entrypoint | None = None  # python only
    options: dict[NonEmptyStr, Any] = Field(default_factory=dict)  # python only

    @model_validator(mode="after")
    def _bottom_ends_at_embedding_dim(self) -> Model:
        issues: list[tuple[tuple[str, ...], str]] = []
        if self.type != "python" and self.bottom_mlp and self.bottom_mlp[-1] != self.embedding_dim:
            issues.append(
                (
                    ("bottom_mlp",),
                    f"must end with embedding_dim ({self.embedding_dim}) so dense and sparse "
                    f"features can interact; got {self.bottom_mlp[-1]}",
                )
            )
        if self.type != "dcn_v2":
            for name in ("cross_layers", "cross_rank"):
                if getattr(self, name) is not None:
                    issues.append(
                        ((name,), f"belongs to type dcn_v2 (the cross network); type is {self.type}")
                    )
        issues.extend(self._python_issues())
        if issues:
            raise_issues(issues)
        return self

    def _python_issues(self) -> list[tuple[tuple[str, ...], str]]:
        """A python model's own fields, and the built-in kinds' fields it would silently ignore."""
        issues: list[tuple[tuple[str, ...], str]] = []
        if self.type != "python":
            for name in ("entrypoint", "options"):
                if name in self.model_fields_set and getattr(self, name):
                    issues.append(((name,), f"belongs to type python (your own model); type is {self.type}"))
            return issues
        if self.entrypoint is None:
            issues.append((("entrypoint",), "type python needs entrypoint: 'package.module:factory'"))
        for name in BUILT_IN_ONLY:
            if name in self.model_fields_set:
                issues.append(
                    ((name,), "belongs to the built-in models; a python model is configured by its options")
                )
        row_wise = sorted(c for c, how in self.sharding.items() if how == "row_wise")
        if row_wise:
            issues.append(
                (
                    ("sharding",),
                    f"row_wise tables ({', '.join(row_wise)}) are for the built-in models; a python "
                    "model's tables are replicated on every trainer",
                )
            )
        try:
            json.dumps(self.options, allow_nan=False)
        except (TypeError, ValueError) as exc:
            issues.append((("options",), f"must hold JSON values (strings, numbers, lists, maps): {exc}"))
        return issues


class SparseOptimizer(StrictModel):
    type: Literal["adagrad", "sparse_adam"] = "adagrad"
    lr: PositiveFloat = 0.05


class DenseOptimizer(StrictModel):
    type: Literal["adam", "adagrad", "sgd"] = "adam"
    lr: PositiveFloat = 0.001


class Optimizer(StrictModel):
    sparse: SparseOptimizer = Field(default_factory=SparseOptimizer)
    dense: DenseOptimizer = Field(default_factory=DenseOptimizer)


# A stream's rows move the dense layers (MLPs) at this fraction of their rate in ``mixed`` mode.
STREAM_DENSE_LR_MULTIPLIER = 0.1


class SourceControl(StrictModel):
    """Update control for one source: its loss weight, learning-rate multipliers and share cap.

    ``cap`` bounds the source's share of rows within the mixing window, so a traffic spike cannot
    take over the model however far it lags. ``dense_lr_multiplier`` scales, on top of
    ``lr_multiplier``, the rate at which the source's rows move the dense layers (the MLPs; the
    embeddings keep ``lr_multiplier`` alone). Unset, it is ``STREAM_DENSE_LR_MULTIPLIER`` for a stream
    source in ``mixed`` mode and 1 otherwise: a stream arrives in time order and cannot be shuffled
    without delaying it, so every batch is one slice of the day; Adam's fixed-size steps on such
    batches pull the layers every entity shares towards the current hour, where an embedding row
    moves only when its own user or item is seen. The history, shuffled, teaches the dense layers;
    the stream still moves them, ten times more slowly, and moves the embeddings at full rate.
    """

    loss_weight: NonNegativeFloat = 1.0
    lr_multiplier: PositiveFloat = 1.0
    dense_lr_multiplier: PositiveFloat | None = None
    cap: Share = 1.0


class Freshness(StrictModel):
    """The freshness guard: when the stream lags by more than ``max_lag_records`` unconsumed records
    or its next record is older than ``max_event_age_s``, its share rises to ``max_share`` until it
    catches up. ``clock: replay`` measures age against the history already trained instead of the wall
    clock, and holds a stream record back until history has reached its event time: that is how a
    backfill replays the past as it happened.

    ``clock: auto`` (the default) chooses: against the wall clock, years-old history makes every
    record look infinitely stale and the guard mixes by that, so old data is replayed; once the
    newest event trained is within ``live_lag_s`` of the wall clock the data is live, and the wall
    clock takes over for good (once: a later outage must not turn live training back into a replay).
    An hour is the default because it separates the two cases by orders of magnitude: a backfill is
    days to years behind, while a live stream's newest trained event trails by seconds to minutes,
    with room for a sparse stream or a restart's backlog. ``wall`` or ``replay`` fix the clock."""

    source: SourceName | None = None
    max_lag_records: PositiveInt | None = 10_000
    max_event_age_s: PositiveFloat | None = 300.0
    max_share: Share = 0.8
    clock: Literal["auto", "wall", "replay"] = "auto"
    live_lag_s: PositiveFloat = 3600.0


class Shuffle(StrictModel):
    """Seeded shuffling of each files source's rows within a window (``spec.seed``): rows are served
    in time order, task after task, and training on them in that order correlates every step. A
    buffer of ``buffer_rows`` rows is drawn from uniformly and refilled as it drains, never across a
    window boundary, so windows still train in time order; memory is bounded by the buffer and a
    checkpoint holds it, so a resumed run draws exactly what an uninterrupted one would. 65,536 rows
    (about 20 MB for a Criteo-sized row) spans several row groups, which is what breaks the
    correlation; 0 trains rows in the order served."""

    buffer_rows: NonNegativeInt = 65_536


class Replay(StrictModel):
    """Replaying history while the stream trains: ``share`` of each step's rows drawn from the
    windows of ``source`` (the files source; the only one when omitted) that the primary pass has
    finished, the last ``windows`` of them (0: all), sampled task by task from the task graph. What a
    model forgets of the past while it follows a drifting stream, replay keeps; the price is that
    fraction of each step. Off by default: it pays off where the past recurs (seasonality, returning
    users), and costs freshness where it does not. Only ``mixed`` mode replays (the stream must be
    trained for there to be anything to protect against). Replayed rows are counted as replays
    (``rows_replayed``), never as the history's consumption: the primary pass stays exactly once."""

    share: Annotated[float, Strict(), Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    windows: NonNegativeInt = 0
    source: SourceName | None = None


class Mixing(StrictModel):
    window_steps: Annotated[int, Strict(), Field(gt=0, le=1_000_000)] = 100
    sources: dict[SourceName, SourceControl] = Field(default_factory=dict)
    freshness: Freshness = Field(default_factory=Freshness)
    shuffle: Shuffle = Field(default_factory=Shuffle)
    replay: Replay = Field(default_factory=Replay)


def _check_storage(location: str | None, storage: ObjectStorage | None) -> None:
    problems = storage_issues(location or ".", storage)
    if problems:
        raise_issues([(("storage" if storage is not None else "dir",), p) for p in problems])


class Checkpoint(StrictModel):
    """Checkpoints are written every ``every_steps`` steps or ``every_s`` seconds, whichever comes
    first (0 turns a trigger off); Kafka offsets are committed only after one is durable."""

    dir: NonEmptyStr | None = None  # a local directory, s3://bucket/prefix or hdfs://namenode/path
    every_steps: NonNegativeInt = 500
    every_s: NonNegativeFloat = 60.0
    keep: KeepCount = 3
    storage: ObjectStorage | None = None  # how to reach an s3:// dir (as a files source's)

    @model_validator(mode="after")
    def _storage_fits_dir(self) -> Checkpoint:
        _check_storage(self.dir, self.storage)
        return self


class Publish(StrictModel):
    dir: NonEmptyStr | None = None  # a local directory, s3://bucket/prefix or hdfs://namenode/path
    every_steps: NonNegativeInt = 0
    every_s: NonNegativeFloat = 600.0
    keep: KeepCount = 5
    storage: ObjectStorage | None = None

    @model_validator(mode="after")
    def _storage_fits_dir(self) -> Publish:
        _check_storage(self.dir, self.storage)
        return self


class Evaluation(StrictModel):
    """Progressive validation scores each stream batch before training on it; ``window_rows`` is the
    sliding window its AUC and log-loss are reported over. ``holdout`` is a time window of the file
    sources evaluated once at the end (it must not overlap the training window)."""

    window_rows: RowCount = 20_000
    holdout: Window | None = None


class TrainingSpec(StrictModel):
    mode: Mode = "mixed"
    batch_size: BatchRows = 512
    seed: NonNegativeInt = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    data_executors: ProcessCount = 1
    # Data-parallel trainer processes (torch.distributed, gloo on CPU); each hosts its own data
    # service over a disjoint share of the files and reads partitions p with p % trainers == rank.
    trainers: ProcessCount = 1
    # torch intra-op threads; default: the cores left after one per local data executor (at least 1),
    # so the trainer does not fight its own data plane for CPU.
    threads: ThreadCount | None = None
    model: Model = Field(default_factory=Model)
    optimizer: Optimizer = Field(default_factory=Optimizer)
    mixing: Mixing = Field(default_factory=Mixing)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    publish: Publish = Field(default_factory=Publish)
    evaluation: Evaluation = Field(default_factory=Evaluation)


class PrimusTraining(StrictModel):
    """The hub version (the newest): an older document is converted to it on load (contracts/versions.py)."""

    api_version: Literal["primus.dev/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["PrimusTraining"]
    metadata: Metadata
    spec: TrainingSpec = Field(default_factory=TrainingSpec)


def default_training(name: str = "default", data: PrimusData | None = None) -> PrimusTraining:
    """The embedded defaults, used when only a data document is given: mixed training, or batch
    training when the data has no stream to mix in."""
    spec: dict[str, Any] = {}
    if data is not None and not any(isinstance(s, KafkaSource) for s in data.spec.sources):
        spec["mode"] = "batch"
    return PrimusTraining.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "PrimusTraining",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def validate_training_spec(document: Mapping[str, Any]) -> PrimusTraining:
    """A validated PrimusTraining of any served version, as the hub (v1beta1) model."""
    hub, issues = to_hub(document, "PrimusTraining")
    try:
        training = PrimusTraining.model_validate(hub)
    except ValidationError as exc:
        issues = issues + issues_from_validation_error(exc, PrimusTraining)
    if issues:
        raise SpecError(issues)
    return training


def kafka_sources(data: PrimusData) -> list[KafkaSource]:
    """Every Kafka source of the data: a job reads them all, each as its own stream."""
    return [s for s in data.spec.sources if isinstance(s, KafkaSource)]


def stream_source(training: PrimusTraining, data: PrimusData) -> KafkaSource | None:
    """The stream the freshness guard watches: the one ``mixing.freshness.source`` names, else the
    Kafka source of highest mixture priority (then weight, then the first declared). The guard
    watches one stream because its lag and age are one figure; the other streams are mixed by their
    weights and take spare capacity by their priorities like any source."""
    name = training.spec.mixing.freshness.source
    kafka = kafka_sources(data)
    if name is not None:
        return next((s for s in kafka if s.name == name), None)
    mixture = {m.source: m for m in data.spec.mixture}

    def rank(s: KafkaSource) -> tuple[int, float]:
        entry = mixture.get(s.name)
        return (-(entry.priority if entry else 0), -(entry.weight if entry else 1.0))

    return min(kafka, key=rank) if kafka else None  # min keeps the first declared among equals


def _hash_buckets(data: PrimusData) -> dict[str, int]:
    out: dict[str, int] = {}
    for source in data.spec.sources:
        for t in source.schema_.column_steps:
            if t.hash_bucket is not None:
                out[t.column] = max(out.get(t.column, 0), t.hash_bucket)
    return out


def table_sizes(training: PrimusTraining, data: PrimusData) -> dict[str, int]:
    """Embedding table size per sparse column: the override, else the column's hash bucket count."""
    buckets = _hash_buckets(data)
    sizes: dict[str, int] = {}
    for column in embedded_columns(data):
        size = training.spec.model.buckets.get(column, buckets.get(column))
        if size is not None:
            sizes[column] = size
    return sizes


def feature_columns(data: PrimusData) -> tuple[list[str], list[str]]:
    """(sparse, dense) column names; every source must declare the same ones, in the same order,
    because one model reads them all."""
    first = data.spec.sources[0].schema_
    return list(first.sparse), list(first.dense)


def multi_hot_columns(data: PrimusData) -> list[MultiHot]:
    """The multi-hot (list) columns, as every source declares them (``check_against`` holds them to
    sources[0]'s): each gets a table like a sparse column, pooled as declared."""
    return list(data.spec.sources[0].schema_.multi_hot)


def embedded_columns(data: PrimusData) -> list[str]:
    """Every column with an embedding table: the sparse ones, then the multi-hot ones."""
    return [*feature_columns(data)[0], *(m.column for m in multi_hot_columns(data))]


def replay_source(spec: TrainingSpec, data: PrimusData) -> str | None:
    """The files source ``mixing.replay`` draws from: the one it names, else the only one."""
    files = [s.name for s in data.spec.sources if is_history(s)]
    named = spec.mixing.replay.source
    if named is not None:
        return named if named in files else None
    return files[0] if len(files) == 1 else None


def _replay_issues(spec: TrainingSpec, data: PrimusData) -> list[SpecIssue]:
    replay = spec.mixing.replay
    if replay.share == 0 or replay_source(spec, data) is not None:
        return []
    files = [s.name for s in data.spec.sources if is_history(s)]
    if replay.source is not None:
        what = f"{replay.source!r} is not a files source (files sources: {', '.join(files) or 'none'})"
        return [SpecIssue("spec.mixing.replay.source", what)]
    what = (
        "replay needs a files source" if not files else f"name the files source to replay: {', '.join(files)}"
    )
    return [SpecIssue("spec.mixing.replay.source", what)]


def _sharding_issues(spec: TrainingSpec, sparse: list[str]) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    for column in spec.model.sharding:
        if column not in sparse:
            hint = suggest(column, sparse)
            issues.append(
                SpecIssue(
                    f"spec.model.sharding.{column}",
                    f"{column!r} is not a sparse column"
                    + (f"; did you mean {hint!r}?" if hint else f" (sparse columns: {', '.join(sparse)})"),
                )
            )
    row_wise = "row_wise" in spec.model.sharding.values()
    where = spec.checkpoint.dir or ""
    if row_wise and "://" in where and not where.startswith("file://"):
        issues.append(
            SpecIssue(
                "spec.checkpoint.dir",
                f"row_wise tables are checkpointed one file per trainer's shard into a directory every "
                f"trainer shares; {where!r} is an object store (use a local or shared filesystem path)",
            )
        )
    return issues


def check_against(training: PrimusTraining, data: PrimusData) -> None:
    """Cross-document checks: everything that needs both the training and the data document."""
    issues: list[SpecIssue] = []
    names = [s.name for s in data.spec.sources]
    spec = training.spec
    for name in spec.mixing.sources:
        if name not in names:
            hint = suggest(name, names)
            issues.append(
                SpecIssue(
                    f"spec.mixing.sources.{name}",
                    f"no source named {name!r} in data document {data.metadata.name!r}"
                    + (f"; did you mean {hint!r}?" if hint else f" (sources: {', '.join(names)})"),
                )
            )
    freshness = spec.mixing.freshness
    if freshness.source is not None and stream_source(training, data) is None:
        kafka = [s.name for s in kafka_sources(data)]
        issues.append(
            SpecIssue(
                "spec.mixing.freshness.source",
                f"{freshness.source!r} is not a kafka source (kafka sources: {', '.join(kafka) or 'none'})",
            )
        )
    issues.extend(_replay_issues(spec, data))
    sparse, dense = feature_columns(data)
    lists = multi_hot_columns(data)
    for i, source in enumerate(data.spec.sources):
        if (list(source.schema_.sparse), list(source.schema_.dense)) != (sparse, dense):
            issues.append(
                SpecIssue(
                    f"<data>.spec.sources[{i}].schema",
                    f"declares sparse={list(source.schema_.sparse)} dense={list(source.schema_.dense)}; "
                    f"one model reads every source, so it must match sources[0] (sparse={sparse}, "
                    f"dense={dense})",
                )
            )
        elif list(source.schema_.multi_hot) != lists:
            issues.append(
                SpecIssue(
                    f"<data>.spec.sources[{i}].schema.multi_hot",
                    f"declares {[m.model_dump() for m in source.schema_.multi_hot]}; one model reads "
                    f"every source, so it must match sources[0] ({[m.model_dump() for m in lists]})",
                )
            )
    embedded = embedded_columns(data)
    model = spec.model
    # The cross network's input: the bottom MLP's output (with dense columns) and one embedding a
    # sparse column, each embedding_dim wide; a rank above that is no low-rank factorisation.
    cross_width = (len(embedded) + (1 if dense else 0)) * model.embedding_dim
    if model.cross_rank is not None and model.cross_rank > cross_width:
        issues.append(
            SpecIssue(
                "spec.model.cross_rank",
                f"{model.cross_rank} is above the cross network's input width {cross_width} "
                f"(({len(embedded)} sparse + {1 if dense else 0} dense feature) x embedding_dim "
                f"{model.embedding_dim}); leave it unset for full rank",
            )
        )
    sizes = table_sizes(training, data)
    for column in embedded:
        if column not in sizes:
            kind = "sparse" if column in sparse else "multi_hot"
            issues.append(
                SpecIssue(
                    f"spec.model.buckets.{column}",
                    f"{kind} column {column!r} has no hash_bucket transform in the data schema; "
                    "give its table size here",
                )
            )
    for column in spec.model.buckets:
        if column not in embedded:
            issues.append(
                SpecIssue(f"spec.model.buckets.{column}", f"{column!r} is not a sparse or multi_hot column")
            )
    issues.extend(_sharding_issues(spec, embedded))
    if spec.mode in ("stream", "mixed") and not kafka_sources(data):
        issues.append(SpecIssue("spec.mode", f"mode {spec.mode!r} needs a kafka source"))
    if spec.mode in ("batch", "mixed") and not [s for s in data.spec.sources if is_history(s)]:
        issues.append(SpecIssue("spec.mode", f"mode {spec.mode!r} needs a files source"))
    holdout = spec.evaluation.holdout
    window = data.spec.window
    overlaps = holdout is not None and window is not None and holdout.start < window.end
    if overlaps and holdout is not None and window is not None and window.start < holdout.end:
        issues.append(
            SpecIssue(
                "spec.evaluation.holdout",
                f"overlaps the training window [{window.start.isoformat()}, {window.end.isoformat()})",
            )
        )
    if issues:
        raise SpecError(issues)
