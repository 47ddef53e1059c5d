"""``primus bench model``: the model kinds side by side on ``primus bench hybrid``'s world, with the
embedded defaults.

- ``dlrm_auc``, ``dcn_v2_auc`` (and ``user_model_auc``): progressive AUC of a mixed run (every stream
  event scored before any update that trains on it) of each kind on identical data;
- ``builtin_samples_s``, ``user_model_samples_s``, ``dcn_v2_samples_s``: rows per second of the
  training step alone, fed the same recorded steps of the DLRM run from memory, one pass per kind in
  interleaved rounds (the data plane's CPU and a shared machine's drift would otherwise swamp a
  difference of a few per cent), medians over the rounds; ``user_model_ratio`` the median of each
  round's ratio user / built-in, where the user model is the built-in DLRM brought as a ``type:
  python`` entrypoint (``bench/dlrm_protocol.py``): what the escape hatch costs on the hot path.
  Target: at least ``USER_MODEL_TARGET``;
- ``json_ingest_rows_s``, ``avro_ingest_rows_s``: stream ingest (poll, decode, transform, tensors)
  of the world's events as JSON and as Avro records (``bench/avro_ingest.py``);
- ``multi_hot_rows_s``, ``single_hot_rows_s``: the data service's rows per second over the same
  files (``LIST_BENCH_SCALE`` times the history's rows) with and without a 20-long list column
  declared multi-hot, alternated in one run (``bench/multi_hot.py``).

Figures of features this version does not have are printed as null, with the reason in
``not_measured`` (none at present).
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from airflow_provider_primus.bench.avro_ingest import avro_ingest
from airflow_provider_primus.bench.dlrm_protocol import ENTRYPOINT
from airflow_provider_primus.bench.hybrid import (
    WARMUP_STEPS,
    broker,
    defaults_training,
    ingest,
    publish_world,
    run_mode,
)
from airflow_provider_primus.bench.multi_hot import list_column_speeds
from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.contracts.training import PrimusTraining, validate_training_spec
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.gen.clicklog import World, live_start
from airflow_provider_primus.training.runtime import Trainer, TrainOptions

log = logging.getLogger(__name__)

USER_MODEL_TARGET = 0.95
NOT_MEASURED: dict[str, str] = {}
# The list bench serves this many times the history's rows (at least the minimum): one pass of the
# history alone is under a second at the data service's speed, too short to rise above a shared
# machine's jitter.
LIST_BENCH_SCALE, LIST_BENCH_MIN_ROWS = 4, 20_000


def with_model(training: PrimusTraining, model: dict[str, Any]) -> PrimusTraining:
    """``training`` with its ``model`` section replaced (the rest, defaults included, kept)."""
    document = training.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["spec"]["model"] = model
    return validate_training_spec(document)


def _kinds(defaults: PrimusTraining) -> dict[str, PrimusTraining]:
    m = defaults.spec.model
    common = {"embedding_dim": m.embedding_dim, "buckets": dict(m.buckets)}
    built_in = {
        **common,
        "bottom_mlp": m.bottom_mlp,
        "top_mlp": m.top_mlp,
        "dense_transform": m.dense_transform,
    }
    options = {
        "bottom_mlp": m.bottom_mlp, "top_mlp": m.top_mlp, "dense_transform": m.dense_transform,
        "seed": defaults.spec.seed,
    }  # fmt: skip
    return {
        "dlrm": with_model(defaults, {**built_in, "type": "dlrm"}),
        "dcn_v2": with_model(defaults, {**built_in, "type": "dcn_v2"}),
        "user": with_model(
            defaults, {**common, "type": "python", "entrypoint": ENTRYPOINT, "options": options}
        ),
    }


def _rows_per_step(steps: list[list[tuple[str, TensorBatch]]]) -> float:
    measured = steps[WARMUP_STEPS + 1 :]
    return sum(len(b) for parts in measured for _, b in parts) / max(1, len(measured))


def run(
    *,
    history_days: int = 6,
    stream_days: int = 1,
    rows_per_day: int = 20_000,
    users: int = 20_000,
    items: int = 5_000,
    batch_size: int = 512,
    seed: int = 7,
    repeats: int = 5,
    bootstrap_servers: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    root = Path(workdir or tempfile.mkdtemp(prefix="primus-bench-model-"))
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    world = World.from_defaults(
        seed=seed,
        start=live_start(history_days + stream_days, datetime.now(UTC)),
        history_days=history_days,
        stream_days=stream_days,
        rows_per_day=rows_per_day,
        users=users,
        items=items,
    )
    with broker(bootstrap_servers, root) as bootstrap:
        log.info("publishing the click log")
        data, messages = publish_world(world, root / "live", bootstrap, "model")
        kinds = _kinds(defaults_training(data, batch_size, seed))
        runs = {k: run_mode(data, t, "mixed", root / k, record=k == "dlrm") for k, t in kinds.items()}
        steps = runs["dlrm"].pop("_steps")
        speeds = _paired_speeds(data, kinds, steps, root, repeats)
        stream = next(s for s in data.spec.sources if isinstance(s, KafkaSource))
        log.info("stream ingest, JSON and Avro")
        json_ingest = ingest(stream)["ours_rows_s"]
        avro = avro_ingest(stream, root / "avro", ingest)
    list_rows = max(LIST_BENCH_MIN_ROWS, LIST_BENCH_SCALE * history_days * rows_per_day)
    lists = list_column_speeds(root / "lists", list_rows, repeats)
    auc = {k: r["progressive"]["auc"] for k, r in runs.items()}
    ratio = statistics.median(u / b for b, u, _ in speeds)
    return {
        "history_rows": history_days * rows_per_day,
        "stream_messages": messages,
        "batch_size": batch_size,
        "rows_per_step": round(_rows_per_step(steps), 1),
        "repeats": repeats,
        "dlrm_auc": auc["dlrm"],
        "dcn_v2_auc": auc["dcn_v2"],
        "user_model_auc": auc["user"],
        "rows_trained": {k: r["rows_trained"] for k, r in runs.items()},
        "builtin_samples_s": round(statistics.median(b for b, _, _ in speeds)),
        "user_model_samples_s": round(statistics.median(u for _, u, _ in speeds)),
        "dcn_v2_samples_s": round(statistics.median(d for _, _, d in speeds)),
        "user_model_ratio": round(ratio, 3),
        "user_model_target": USER_MODEL_TARGET,
        "user_model_target_met": ratio >= USER_MODEL_TARGET,
        "json_ingest_rows_s": round(json_ingest),
        "avro_ingest_rows_s": round(avro["avro_ingest_rows_s"]),
        **lists,
        **dict.fromkeys(NOT_MEASURED),
        "not_measured": NOT_MEASURED,
        "torch_threads": torch.get_num_threads(),
    }


def _paired_speeds(
    data: PrimusData,
    kinds: dict[str, PrimusTraining],
    steps: list[list[tuple[str, TensorBatch]]],
    root: Path,
    repeats: int,
) -> list[tuple[float, float, float]]:
    """(built-in, user, dcn_v2) rows/s of the training step over the same recorded steps: one trainer
    per kind built once, then ``repeats`` rounds of one pass each, interleaved, so each triple shares
    the machine's conditions (a pass is a second or two; a shared machine drifts over minutes)."""
    trainers = {
        k: Trainer(data, kinds[k], TrainOptions(workdir=root / "memory" / k, mode="mixed", resume=False))
        for k in ("dlrm", "user", "dcn_v2")
    }
    measured = steps[WARMUP_STEPS + 1 :]
    rows = _rows_per_step(steps) * len(measured)
    try:
        for trainer in trainers.values():
            for parts in steps[:WARMUP_STEPS]:
                trainer.updater.step(parts)
        out = []
        for i in range(repeats):
            log.info("the training step from memory (%d/%d)", i + 1, repeats)
            speed = {}
            order = list(trainers.items())
            for kind, trainer in order if i % 2 == 0 else order[::-1]:  # no kind always first
                started = time.perf_counter()
                for parts in measured:
                    trainer.updater.step(parts)
                speed[kind] = rows / (time.perf_counter() - started)
            out.append((speed["dlrm"], speed["user"], speed["dcn_v2"]))
        return out
    finally:
        for trainer in trainers.values():
            trainer.close()
