"""``primus bench hybrid``: batch vs stream vs mixed training on one drifting world, plus the costs of
mixing and of stream ingestion, in one run.

The world (``primus gen``) has ``history_days`` of Parquet history and ``stream_days`` of JSON events
in Kafka; its last stream day is today (``gen.clicklog.live_start``), so the stream is what a live
topic holds. The three modes run on identical data with identical evaluation: every stream event is
scored before any update that trains on it (progressive validation). Three settings side by side:

- **best** (``auc``): explicit settings, ``freshness.clock: replay`` — a stream event becomes
  available once the history has been trained up to its event time, as it would have been had the
  job been running then. So ``batch`` is the offline model as of the end of history, ``stream`` a
  model trained on the stream alone, and ``mixed`` one model updated from the history and then the
  stream in the same process;
- **defaults** (``defaults_*``): what ``primus train`` uses without a training document
  (``default_training``), with only the batch size and seed of the best run, on the same data — what
  a user evaluating the product gets;
- **old log** (``old_log_*``): the same world with every event time ``OLD_LOG_DAYS`` earlier (a
  backfill of logs years old), trained with the defaults: the clock must not take a replay of the
  past for a stream that lags by years;
- **stationary world** (``stationary_world_*``): the live world without the items' popularity
  lifecycle (``World.item_lifecycle=False``), trained with the
  defaults: what fresh training gains when only the latent interests drift and items are born, shown
  beside the default world so that neither hides the other.

The targets are on the defaults: mixed beats batch-only and stream-only by
``TARGET_MARGIN`` AUC on the live data, and batch-only by as much on the old log (the generator's
default world, with the lifecycle; the stationary world's figures are reported, not targeted).

Overheads, measured on the mixed run itself:
- ``mixing_overhead_ratio``: steps/s of the mixed run (data service + Kafka + mixer feeding the
  model) over steps/s of the same step tensors fed to the same training step from memory;
- ``ingest_ratio``: stream ingest rows/s (poll, decode, transform, tensors) over a bare kafka-python
  consumer reading the same topic (``json_ingest_rows_s`` is the same figure as ``ingest_rows_s``);
- ``avro_ingest_rows_s``: the same events as Avro records (a schema file) through the stream source,
  beside ``avro_bare_consumer_rows_s`` (polling only) and ``avro_decode_only_rows_s`` (polling and
  fastavro decoding, nothing else): ``bench/avro_ingest.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch

from airflow_provider_primus.bench.avro_ingest import avro_ingest
from airflow_provider_primus.bench.bare_consumer import bare_pass
from airflow_provider_primus.bench.item_ctr import item_ctr_reference
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.contracts.training import (
    PrimusTraining,
    default_training,
    validate_training_spec,
)
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.gen.clicklog import World, live_start
from airflow_provider_primus.gen.events import produce_stream
from airflow_provider_primus.gen.files import write_data_spec, write_history
from airflow_provider_primus.training.feeds.feed import MemoryFeed
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from airflow_provider_primus.training.stream.source import StreamSource

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

MODES = ("batch", "stream", "mixed")
OLD_LOG_MODES = ("batch", "mixed")
WARMUP_STEPS = 10
# About six years (6 x 365.25 days), in whole days so that day 0 stays a UTC midnight.
OLD_LOG_DAYS = 2192
# How much better mixed must score than each single-source mode, in AUC, to meet a target.
TARGET_MARGIN = 0.01


def bench_training(batch_size: int, seed: int) -> PrimusTraining:
    """The explicit best settings: replay the past as it happened, no checkpoints or publishing (they
    cost time in the overhead figures and change nothing trained)."""
    return validate_training_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "bench-hybrid"},
            "spec": {
                "batch_size": batch_size,
                "seed": seed,
                "device": "auto",
                "mixing": {
                    "window_steps": 100,
                    "freshness": {"clock": "replay", "max_event_age_s": 3600, "max_share": 0.8},
                },
                "checkpoint": {"every_steps": 0, "every_s": 0},
                "publish": {"every_steps": 0, "every_s": 0},
                "evaluation": {"window_rows": 20_000},
            },
        }
    )


def defaults_training(data: PrimusData, batch_size: int, seed: int) -> PrimusTraining:
    """The embedded defaults (``default_training``: what ``primus train`` uses with no training
    document) with the best run's batch size and seed and nothing else: the batch size because
    ``--batch-size`` is the benchmark's, the seed so that the two differ by their settings and not by
    initialisation. Checkpoints and publishing stay on, as a user gets them."""
    document = default_training("bench-hybrid-defaults", data).model_dump(mode="json", by_alias=True)
    document["spec"].update(batch_size=batch_size, seed=seed)
    return validate_training_spec(document)


@contextlib.contextmanager
def broker(bootstrap: str | None, workdir: Path) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from airflow_provider_primus.embedded.kafka.broker import EmbeddedKafka
    from airflow_provider_primus.embedded.kafka.distribution import ensure_distribution

    kafka = EmbeddedKafka(ensure_distribution(), workdir / "kafka", instance="bench")
    state = kafka.start()
    try:
        yield state.bootstrap_servers
    finally:
        kafka.stop()


def run_mode(
    data: PrimusData, training: PrimusTraining, mode: str, workdir: Path, record: bool
) -> dict[str, Any]:
    steps: list[list[tuple[str, TensorBatch]]] = []
    times: list[float] = []

    def trace(_step: int, parts: list[tuple[str, TensorBatch]]) -> None:
        times.append(time.perf_counter())
        if record:
            steps.append(parts)

    log.info("training %s (%s)", mode, workdir.name)
    options = TrainOptions(workdir=workdir / mode, mode=mode, trace=trace, resume=False)
    trainer = Trainer(data, training, options)
    result = trainer.run()
    steady = len(times) - 1 - WARMUP_STEPS
    result["steps_per_s_steady"] = steady / (times[-1] - times[WARMUP_STEPS]) if steady > 0 else None
    result["_steps"] = steps
    return result


def _through_mixer(
    data: PrimusData, training: PrimusTraining, steps: list[list[tuple[str, TensorBatch]]], workdir: Path
) -> float:
    """Steps/s of the full loop — guard, mixer, feeds, slicing, training — with every source's rows
    already in memory: the cost of mixing itself, without the data plane's CPU."""
    per_source: dict[str, list[TensorBatch]] = {}
    streams = {s.name for s in data.spec.sources if isinstance(s, KafkaSource)}
    for parts in steps:
        for name, batch in parts:
            per_source.setdefault(name, []).append(batch)
    feeds = {n: MemoryFeed(n, b, stream=n in streams) for n, b in per_source.items()}
    times: list[float] = []
    options = TrainOptions(
        workdir=workdir / "through-mixer",
        mode="mixed",
        resume=False,
        feeds=feeds,
        trace=lambda _s, _p: times.append(time.perf_counter()),
    )
    Trainer(data, training, options).run()
    return (len(times) - 1 - WARMUP_STEPS) / (times[-1] - times[WARMUP_STEPS])


def _from_memory(
    data: PrimusData, training: PrimusTraining, steps: list[list[tuple[str, TensorBatch]]], workdir: Path
) -> float:
    """Steps/s of the same training step on the mixed run's recorded tensors, with no feeds."""
    trainer = Trainer(data, training, TrainOptions(workdir=workdir / "memory", mode="mixed", resume=False))
    try:
        for parts in steps[:WARMUP_STEPS]:
            trainer.updater.step(parts)
        started = time.perf_counter()
        for parts in steps[WARMUP_STEPS + 1 :]:
            trainer.updater.step(parts)
        return (len(steps) - WARMUP_STEPS - 1) / (time.perf_counter() - started)
    finally:
        trainer.close()


def ingest(source: KafkaSource, repeats: int = 5) -> dict[str, float]:
    """Medians over ``repeats`` back-to-back pairs (bare, ours): one pass over a small topic is too
    short to measure alone on a shared machine, and pairing keeps both on the same conditions."""
    runs = [_ingest_once(source) for _ in range(repeats)]
    return {
        "bare_rows_s": statistics.median(r["bare_rows_s"] for r in runs),
        "ours_rows_s": statistics.median(r["ours_rows_s"] for r in runs),
        "ratio": statistics.median(r["ours_rows_s"] / r["bare_rows_s"] for r in runs),
        "messages": runs[0]["messages"],
    }


def _ingest_once(source: KafkaSource) -> dict[str, float]:
    """Rows/s through our stream source vs a bare kafka-python consumer, same topic, same fetch sizes."""
    total, bare_s, partitions = bare_pass(source)
    ours = StreamSource(source, start_offsets=dict.fromkeys(partitions, 0), bounded=True, dead_letters=False)
    started = time.perf_counter()
    rows = 0
    while not ours.exhausted():
        ours.fill(5000)
        rows += sum(len(b) for b in ours.take(ours.buffered()))
    ours_s = time.perf_counter() - started
    ours.close()
    return {"bare_rows_s": total / bare_s, "ours_rows_s": rows / ours_s, "messages": total}


def publish_world(world: World, root: Path, bootstrap: str, label: str) -> tuple[PrimusData, int]:
    """The world's history under ``root``, its stream on a new topic, and the data document."""
    root.mkdir(parents=True, exist_ok=True)
    topic = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    write_history(world, root)
    messages = produce_stream(world, bootstrap, topic)
    return load_data_spec(write_data_spec(world, root, bootstrap_servers=bootstrap, topic=topic)), messages


def _auc(result: dict[str, Any]) -> float | None:
    value: float | None = result["progressive"]["auc"]
    return value


def _beats(better: float | None, worse: float | None, margin: float = 0.0) -> bool:
    """``better`` > ``worse`` (margin 0) or by at least ``margin`` (AUCs are rounded to 6 digits, so
    is the difference, lest 0.01 fall short by a float's last bit)."""
    if better is None or worse is None:
        return False
    diff = round(better - worse, 6)
    return diff >= margin if margin else diff > 0


def _reference(world: World, batch_size: int, prefix: str = "") -> dict[str, Any]:
    """The item click-rate counter's AUCs (``bench/item_ctr.py``) and its gain from the stream."""
    log.info("the item click-rate reference%s", f" ({prefix.rstrip('_')})" if prefix else "")
    ref = item_ctr_reference(world, batch_size)
    return {
        f"{prefix}item_ctr_reference_auc": ref,
        f"{prefix}item_ctr_fresh_gain": round(ref["history_and_stream"] - ref["history"], 6),
    }


def _stationary_keys(still: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The stationary world's defaults runs: AUC per mode, whether mixed clears the margin, rows."""
    auc = {m: _auc(r) for m, r in still.items()}
    return {
        "stationary_world_mixed_auc": auc["mixed"],
        "stationary_world_batch_auc": auc["batch"],
        "stationary_world_stream_auc": auc["stream"],
        "stationary_world_logloss": {m: r["progressive"]["logloss"] for m, r in still.items()},
        "stationary_world_rows_trained": {m: r["rows_trained"] for m, r in still.items()},
        "stationary_world_mixed_beats_batch": _beats(auc["mixed"], auc["batch"], TARGET_MARGIN),
        "stationary_world_mixed_beats_stream": _beats(auc["mixed"], auc["stream"], TARGET_MARGIN),
    }


def run(
    *,
    history_days: int = 20,
    stream_days: int = 3,
    rows_per_day: int = 20_000,
    users: int = 20_000,
    items: int = 5_000,
    batch_size: int = 512,
    seed: int = 7,
    bootstrap_servers: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    root = Path(workdir or tempfile.mkdtemp(prefix="primus-bench-hybrid-"))
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    generated = datetime.now(UTC)
    world = World.from_defaults(
        seed=seed,
        start=live_start(history_days + stream_days, generated),
        history_days=history_days,
        stream_days=stream_days,
        rows_per_day=rows_per_day,
        users=users,
        items=items,
    )
    old_world = dataclasses.replace(world, start=world.start - timedelta(days=OLD_LOG_DAYS))
    still_world = dataclasses.replace(world, item_lifecycle=False)
    with broker(bootstrap_servers, root) as bootstrap:
        log.info("publishing the click log")
        data, messages = publish_world(world, root / "live", bootstrap, "clicks")
        old_data, _ = publish_world(old_world, root / "old-log", bootstrap, "old-log")
        training = bench_training(batch_size, seed)
        results = {m: run_mode(data, training, m, root / "best", record=m == "mixed") for m in MODES}
        defaults = defaults_training(data, batch_size, seed)
        by_default = {m: run_mode(data, defaults, m, root / "defaults", record=False) for m in MODES}
        old_defaults = defaults_training(old_data, batch_size, seed)
        old_log = {
            m: run_mode(old_data, old_defaults, m, root / "old-log-runs", False) for m in OLD_LOG_MODES
        }
        log.info("publishing the stationary world")
        still_data, _ = publish_world(still_world, root / "stationary", bootstrap, "stationary")
        still_defaults = defaults_training(still_data, batch_size, seed)
        still = {m: run_mode(still_data, still_defaults, m, root / "stationary-runs", False) for m in MODES}
        recorded = results["mixed"].pop("_steps")
        # Paired and repeated: the two loops take seconds each, and a shared machine's noise between
        # two single runs is larger than the difference being measured.
        log.info("the mixer against in-memory tensors")
        pairs = [
            (_from_memory(data, training, recorded, root), _through_mixer(data, training, recorded, root))
            for _ in range(3)
        ]
        memory_steps_s = statistics.median(m for m, _ in pairs)
        mixer_steps_s = statistics.median(x for _, x in pairs)
        mixing_ratio = statistics.median(x / m for m, x in pairs)
        stream = next(s for s in data.spec.sources if isinstance(s, KafkaSource))
        log.info("stream ingest against a bare consumer")
        ingested = ingest(stream)
        log.info("the same events in Avro: ingest, bare consumer, decode only")
        avro = avro_ingest(stream, root / "avro", ingest)
    reference = _reference(world, batch_size)
    still_reference = _reference(still_world, batch_size, "stationary_world_")
    for r in (*results.values(), *by_default.values(), *old_log.values(), *still.values()):
        r.pop("_steps", None)
    mixed_steps_s = results["mixed"]["steps_per_s_steady"]

    def per_mode(key: str, *sub: str, modes: tuple[str, ...] = MODES) -> dict[str, Any]:
        out = {}
        for m in modes:
            value: Any = results[m][key]
            for k in sub:
                value = value[k]
            out[m] = value
        return out

    auc = per_mode("progressive", "auc")
    d_auc = {m: _auc(r) for m, r in by_default.items()}
    old_auc = {m: _auc(r) for m, r in old_log.items()}
    targets = {
        "defaults_mixed_beats_batch": _beats(d_auc["mixed"], d_auc["batch"], TARGET_MARGIN),
        "defaults_mixed_beats_stream": _beats(d_auc["mixed"], d_auc["stream"], TARGET_MARGIN),
        "old_log_mixed_beats_batch": _beats(old_auc["mixed"], old_auc["batch"], TARGET_MARGIN),
    }
    return {
        "history_rows": history_days * rows_per_day,
        "stream_messages": messages,
        "users": users,
        "items": items,
        "batch_size": batch_size,
        "auc": auc,
        "logloss": per_mode("progressive", "logloss"),
        "freshness_p99_s": per_mode("freshness_s", "p99", modes=("stream", "mixed")),
        "samples_s": per_mode("samples_per_s"),
        "rows_trained": per_mode("rows_trained"),
        "mixed_beats_batch": _beats(auc["mixed"], auc["batch"]),
        "mixed_beats_stream": _beats(auc["mixed"], auc["stream"]),
        "live_start": world.start.date().isoformat(),
        # Seconds from generation to the stream's end (the coming UTC midnight): the stream's part
        # that lies ahead of the wall clock (gen.clicklog.live_start).
        "stream_end_ahead_s": round((world.day_start(world.days) - generated).total_seconds()),
        "defaults_mixed_auc": d_auc["mixed"],
        "defaults_batch_auc": d_auc["batch"],
        "defaults_stream_auc": d_auc["stream"],
        "defaults_logloss": {m: r["progressive"]["logloss"] for m, r in by_default.items()},
        "defaults_rows_trained": {m: r["rows_trained"] for m, r in by_default.items()},
        "defaults_clock": by_default["mixed"]["clock"],
        "old_log_start": old_world.start.date().isoformat(),
        "old_log_mixed_auc": old_auc["mixed"],
        "old_log_batch_auc": old_auc["batch"],
        "old_log_rows_trained": {m: r["rows_trained"] for m, r in old_log.items()},
        "old_log_clock": old_log["mixed"]["clock"],
        "target_margin": TARGET_MARGIN,
        **targets,
        "targets_met": all(targets.values()),
        "item_lifecycle": world.item_lifecycle,
        **reference,
        **_stationary_keys(still),
        **still_reference,
        "memory_steps_s": round(memory_steps_s, 2),
        "mixer_steps_s": round(mixer_steps_s, 2),
        "mixing_overhead_ratio": round(mixing_ratio, 3),
        "mixed_steps_s": round(mixed_steps_s, 2) if mixed_steps_s else None,
        "end_to_end_ratio": round(mixed_steps_s / memory_steps_s, 3) if mixed_steps_s else None,
        "ingest_rows_s": round(ingested["ours_rows_s"]),
        "bare_consumer_rows_s": round(ingested["bare_rows_s"]),
        "ingest_ratio": round(ingested["ratio"], 3),
        "json_ingest_rows_s": round(ingested["ours_rows_s"]),
        "avro_ingest_rows_s": round(avro["avro_ingest_rows_s"]),
        "avro_bare_consumer_rows_s": round(avro["avro_bare_consumer_rows_s"]),
        "avro_decode_only_rows_s": round(avro["avro_decode_only_rows_s"]),
        "avro_ingest_ratio": round(avro["avro_ingest_ratio"], 3),
        "dead_lettered": per_mode("dead_lettered"),
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
    }
