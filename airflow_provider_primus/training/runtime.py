"""The hybrid training runtime: one update process over file sources and a Kafka stream.

Each step the mixer decides rows per source; the rows are concatenated, scored, and the model is
updated with per-source loss weights and a learning-rate scale blended from the sources' multipliers.
Stream rows are scored *before* the update that trains on them (progressive validation), so every
mode is evaluated identically: ``batch`` scores the stream but never trains on it, ``stream`` trains
on the stream only, ``mixed`` trains on both.

Checkpoints hold the model, the optimizers, the mixer, the metrics and every feed's position (the
data service's progress plus untrained buffered rows; the stream's first untrained offsets). Kafka
offsets are committed to the consumer group only after a checkpoint is durable, and a restart
continues from the newest checkpoint with no row lost and none trained twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import yaml

from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.service.auth import new_token
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.resources.allotment import AllotmentWatcher
from airflow_provider_primus.spec.data import FileSource, PrimusData
from airflow_provider_primus.spec.training import (
    PrimusTraining,
    check_against,
    feature_columns,
    stream_source,
    table_sizes,
)
from airflow_provider_primus.training.checkpoint import CheckpointStore
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.feeds import FileFeed, StreamFeed
from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.mixer import MixPolicy, SourcePolicy
from airflow_provider_primus.training.model import DLRM
from airflow_provider_primus.training.optim import Optimizers
from airflow_provider_primus.training.publish import Publisher
from airflow_provider_primus.training.reporter import JobReporter
from airflow_provider_primus.training.stream import StreamSource

log = logging.getLogger(__name__)

__all__ = ["TrainOptions", "Trainer"]

SAVEPOINTS_REPORTED = 1000  # savepoint ids a trainer's report acknowledges (the newest ones)


class Feed(Protocol):
    name: str
    stream: bool

    def available(self, want: int) -> int: ...
    def take(self, rows: int) -> list[TensorBatch]: ...
    def exhausted(self) -> bool: ...
    def state(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


@dataclass
class TrainOptions:
    workdir: Path
    mode: str | None = None  # overrides the training spec's
    spec_path: Path | None = None  # the data document on disk (executors read it); written if absent
    follow: bool = False  # keep following the stream instead of stopping at its end offsets
    max_steps: int | None = None
    passthrough: Sequence[str] = ()
    trace: Callable[[int, list[tuple[str, TensorBatch]]], None] | None = None
    progress: Callable[[dict[str, Any]], None] | None = None
    progress_every_s: float = 2.0
    resume: bool = True
    until: Callable[[Trainer], bool] | None = None  # checked before each step: stop when true
    feeds: Mapping[str, Feed] | None = None  # ready-made feeds instead of the sources (benchmarks)
    rank: int = 0  # data parallelism: this trainer's rank among world_size (see distributed.py)
    world_size: int = 1
    dist_init: str | None = None  # tcp://127.0.0.1:PORT, the rendezvous when world_size > 1
    # As a job's trainer executor: the master's data service instead of one of our own, telemetry
    # and commands through it, and the allotment the backend gives us.
    dispatcher: str | None = None
    token: str | None = None
    open_graph: bool = False  # the job's master may still append windows
    grace_s: float = 0.0  # how long to wait for a restarting master
    executor_name: str = "trainer-0"


@dataclass
class _Metrics:
    rows_trained: dict[str, int] = field(default_factory=dict)
    rows_scored: int = 0
    deferred: dict[str, int] = field(default_factory=dict)
    guard_steps: int = 0
    windows: list[dict[str, Any]] = field(default_factory=list)
    window_rows: dict[str, int] = field(default_factory=dict)
    window_guard: int = 0
    elapsed_s: float = 0.0
    watermark_ms: int = 0  # newest event time trained on: the published watermark and the replay clock

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.__dict__.update(state)


def _device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def _concat(parts: list[tuple[str, TensorBatch]], device: torch.device) -> tuple[torch.Tensor, ...]:
    sparse = torch.cat([b.sparse for _, b in parts]).to(device, non_blocking=True)
    dense = torch.cat([b.dense for _, b in parts]).to(device, non_blocking=True)
    labels = torch.cat([b.labels for _, b in parts]).to(device, non_blocking=True)
    return sparse, dense, labels


class Trainer:
    def __init__(self, data: PrimusData, training: PrimusTraining, options: TrainOptions) -> None:
        check_against(training, data)
        self.data, self.training, self.options = data, training, options
        spec = training.spec
        self.mode = options.mode or spec.mode
        self.device = _device(spec.device)
        self.sparse_cols, self.dense_cols = feature_columns(data)
        sizes = table_sizes(training, data)
        torch.manual_seed(spec.seed)
        cores = max(1, (os.cpu_count() or 1) - spec.data_executors)
        torch.set_num_threads(spec.threads or max(1, cores // options.world_size))
        self.reporter: JobReporter | None = None
        self.allotment = AllotmentWatcher()
        granted = self.allotment.current()
        if granted is not None:
            self.allotment.apply_threads(granted)
        if options.dispatcher is not None:
            client = DispatcherClient(options.dispatcher, options.token or "", grace_s=options.grace_s)
            self.reporter = JobReporter(client, options.executor_name).start()
        self.group = Group(options.rank, options.world_size, options.dist_init)
        # Sparse Adagrad builds COO gradients torch cannot cheaply validate; we opt out explicitly
        # (the default) rather than let every step warn about it.
        torch.sparse.check_sparse_tensor_invariants.disable()  # type: ignore[no-untyped-call]
        self.model = DLRM(
            num_embeddings=[sizes[c] for c in self.sparse_cols],
            num_dense=len(self.dense_cols),
            embedding_dim=spec.model.embedding_dim,
            bottom_mlp=spec.model.bottom_mlp if self.dense_cols else [],
            top_mlp=spec.model.top_mlp,
            seed=spec.seed,
        ).to(self.device)
        self.optim = Optimizers(
            self.model,
            sparse=spec.optimizer.sparse.type,
            sparse_lr=spec.optimizer.sparse.lr,
            dense=spec.optimizer.dense.type,
            dense_lr=spec.optimizer.dense.lr,
        )
        self.workdir = options.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        ckpt_dir = Path(spec.checkpoint.dir) if spec.checkpoint.dir else self.workdir / "checkpoints"
        self.checkpoints = CheckpointStore(ckpt_dir, keep=spec.checkpoint.keep)
        self.publisher = Publisher(
            Path(spec.publish.dir) if spec.publish.dir else self.workdir / "model", keep=spec.publish.keep
        )
        self.stream_src = stream_source(training, data)
        self.scores = ScoreLog()
        self.freshness = Percentiles(seed=spec.seed)
        self.metrics = _Metrics()
        self.step = 0
        self.feeds: dict[str, Feed] = {}
        self._mixer_state: dict[str, Any] | None = None  # from a checkpoint, applied once feeds exist
        self._data_spec_path: Path | None = options.spec_path
        self._closed = False
        # Savepoint ids from the master not yet covered by a checkpoint, and the recent ones that are,
        # grouped by the checkpoint that covered them: reported cumulatively, so an answer the master
        # missed is carried again by the next report.
        self._savepoints_waiting: dict[str, None] = {}
        self._savepoints_done: list[dict[str, Any]] = []

    # -- set-up ------------------------------------------------------------------------------------

    def _participants(self) -> list[str]:
        """Sources this mode reads: batch mode still reads the stream, to score it."""
        names = []
        for s in self.data.spec.sources:
            if s.type == "files" and self.mode in ("batch", "mixed"):
                names.append(s.name)
            if self.stream_src is not None and s.name == self.stream_src.name:
                names.append(s.name)
        return names

    def _trains_on(self, name: str) -> bool:
        stream = self.stream_src is not None and name == self.stream_src.name
        return not stream or self.mode in ("stream", "mixed")

    def _spec_path(self) -> Path:
        """The data document on disk for the executors: the caller's, else written once here."""
        if self._data_spec_path is None:
            path = self.workdir / "primus-data.yaml"
            path.write_text(
                yaml.safe_dump(self.data.model_dump(mode="json", by_alias=True, exclude_none=True))
            )
            self._data_spec_path = path
        return self._data_spec_path

    def _open_feeds(self, states: Mapping[str, Any]) -> None:
        spec = self.training.spec
        names = self._participants()
        files = [s for s in self.data.spec.sources if isinstance(s, FileSource) and s.name in names]
        # With several trainers each hosts its own data service over a disjoint share of the tasks:
        # no trainer ever waits on another's acknowledgements (an ordered graph's barriers would
        # otherwise tie them together), and each keeps its own exact progress.
        if files and self.options.dispatcher is not None:
            if len(files) > 1:
                raise ValueError("a job's trainer reads one files source through the master's data service")
            self.feeds[files[0].name] = FileFeed.attach(
                files[0].name,
                self.options.dispatcher,
                token=self.options.token or "",
                sparse=self.sparse_cols,
                dense=self.dense_cols,
                passthrough=self.options.passthrough,
                state=states.get(files[0].name),
                open_graph=self.options.open_graph,
                grace_s=self.options.grace_s,
            )
        elif files:
            window = self.data.spec.window
            if window is None:
                raise ValueError("training on files sources needs spec.window in the data document")
            graph = plan(self.data, window.start, window.end)
            if graph.missing:
                log.warning("missing partitions: %s", [m.path for m in graph.missing])
            spec_path = self._spec_path()
            token = new_token()
            for source in files:
                source_tasks = [t for t in graph.tasks if t.source == source.name]
                tasks = _share(source_tasks, self.group.rank, self.group.world)
                groups = {t.group for t in tasks}
                edges = [e for e in graph.edges if e[0] in groups and e[1] in groups]
                self.feeds[source.name] = FileFeed(
                    source.name,
                    tasks,
                    edges,
                    spec_path=spec_path,
                    token=token,
                    sparse=self.sparse_cols,
                    dense=self.dense_cols,
                    passthrough=self.options.passthrough,
                    executors=spec.data_executors,
                    batch_rows=max(8192, spec.batch_size * 4),
                    state=states.get(source.name),
                )
        if self.stream_src is not None and self.stream_src.name in names:
            state = states.get(self.stream_src.name)
            mine = None
            if self.group.world > 1:  # partition p belongs to trainer p mod world
                count = len(self.stream_src_partitions())
                mine = [p for p in range(count) if p % self.group.world == self.group.rank]
                if not mine:
                    return  # more trainers than partitions: this one trains on files only
            offsets = (state or {}).get("offsets") or None  # none: nothing trained from it yet
            src = StreamSource(
                self.stream_src,
                passthrough=self.options.passthrough,
                start_offsets={int(p): int(o) for p, o in offsets.items()} if offsets else None,
                bounded=not self.options.follow,
                partitions=mine,
                log_identity=(state or {}).get("log"),
                on_event=self._stream_event,
            )
            if state:
                src.dead_lettered = int(state["dead_lettered"])
                src.skipped_records = int(state.get("skipped_records", 0))
            self.feeds[self.stream_src.name] = StreamFeed(self.stream_src.name, src)

    def _stream_event(self, type_: str, message: str, data: dict[str, Any]) -> None:
        """The stream's events (outage, recovery, offset reset) become the job's events."""
        if self.reporter is not None:
            self.reporter.event(type_, message, data)

    def stream_src_partitions(self) -> list[int]:
        from kafka import KafkaConsumer

        assert self.stream_src is not None
        consumer: Any = KafkaConsumer(bootstrap_servers=self.stream_src.servers(), client_id="primus-meta")
        try:
            return sorted(consumer.partitions_for_topic(self.stream_src.topic) or [])
        finally:
            consumer.close()

    def _policy(self) -> MixPolicy:
        spec = self.training.spec
        weights = {m.source: m for m in self.data.spec.mixture}
        policies = []
        for name in self.feeds:
            entry = weights.get(name)
            control = spec.mixing.sources.get(name)
            policies.append(
                SourcePolicy(
                    name=name,
                    weight=entry.weight if entry else 1.0,
                    priority=entry.priority if entry else 0,
                    cap=control.cap if control else 1.0,
                    stream=self.feeds[name].stream,
                )
            )
        return MixPolicy(
            policies,
            batch_size=spec.batch_size,
            window_steps=spec.mixing.window_steps,
            max_stream_share=spec.mixing.freshness.max_share,
        )

    def restore(self) -> dict[str, Any]:
        found = self.checkpoints.latest() if self.options.resume else None
        if found is None:
            return {}
        step, state = found
        ranks = state["ranks"]
        if len(ranks) != self.group.world:
            raise RuntimeError(
                f"the checkpoint at step {step} was written by {len(ranks)} trainer(s); resume it with "
                f"as many (this job has {self.group.world})"
            )
        mine = ranks[self.group.rank]
        self.step = step
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        self.scores.load_state_dict(mine["scores"])
        self.freshness.load_state_dict(mine["freshness"])
        self.metrics.load_state_dict(mine["metrics"])
        self._mixer_state = mine["mixer"]
        log.info("resumed from checkpoint at step %d", step)
        return dict(mine["feeds"])

    # -- the loop ----------------------------------------------------------------------------------

    def _clock_ms(self) -> int:
        """Now, for freshness and the guard's age check: the wall clock, or in a replay the newest event
        time trained so far (the replayed world's "now" as far as the model knows it)."""
        if self.training.spec.mixing.freshness.clock == "wall":
            return int(time.time() * 1000)
        return self.metrics.watermark_ms

    def _stream_feed(self) -> StreamFeed | None:
        if self.stream_src is None:
            return None
        feed = self.feeds.get(self.stream_src.name)
        return feed if isinstance(feed, StreamFeed) else None

    def _update_gate(self) -> None:
        stream = self._stream_feed()
        if stream is None or self.training.spec.mixing.freshness.clock != "replay":
            return
        history = [f for f in self.feeds.values() if isinstance(f, FileFeed) and not f.exhausted()]
        stream.gate_ms = max((f.watermark_ms for f in history), default=0) if history else None

    def _guard(self) -> tuple[bool, int, float]:
        stream = self._stream_feed()
        if stream is None:
            return False, 0, 0.0
        fresh = self.training.spec.mixing.freshness
        lag = stream.lag_records()
        if not stream.source.available:
            # Deferring history cannot make an absent broker serve sooner: history trains on.
            return False, lag, 0.0
        nxt = stream.next_event_ms()
        age = max(0.0, (self._clock_ms() - nxt) / 1000.0) if nxt is not None else 0.0
        lagging = (fresh.max_lag_records is not None and lag > fresh.max_lag_records) or (
            fresh.max_event_age_s is not None and nxt is not None and age > fresh.max_event_age_s
        )
        return lagging, lag, age

    def _loss_weight(self, name: str) -> float:
        control = self.training.spec.mixing.sources.get(name)
        return control.loss_weight if control else 1.0

    def _lr_multiplier(self, name: str) -> float:
        control = self.training.spec.mixing.sources.get(name)
        return control.lr_multiplier if control else 1.0

    def _train_step(
        self,
        parts: list[tuple[str, TensorBatch]],
        *,
        global_trained: float | None = None,
        lr_weighted: float | None = None,
        loss_weighted: float | None = None,
    ) -> None:
        """Score, then update. The loss is the weighted mean over the *global* step (all trainers);
        the learning rate scales by the row-weighted mean of the sources' multipliers."""
        trained_rows = [(n, b) for n, b in parts if self._trains_on(n)]
        local = sum(len(b) for _, b in trained_rows)
        total = local if global_trained is None else global_trained
        lr_sum = (
            sum(self._lr_multiplier(n) * len(b) for n, b in trained_rows)
            if lr_weighted is None
            else lr_weighted
        )
        weight_sum = (
            sum(self._loss_weight(n) * len(b) for n, b in trained_rows)
            if loss_weighted is None
            else loss_weighted
        )
        logits = None
        self.model.train()
        stream_name = self.stream_src.name if self.stream_src is not None else None
        if parts:
            sparse, dense, labels = _concat(parts, self.device)
            logits = self.model(sparse, dense)
            offset = 0
            probs = torch.sigmoid(logits.detach()).float().cpu().numpy()
            for n, b in parts:
                if n == stream_name:  # progressive validation: scored before the update below
                    self.scores.append(b.labels.numpy(), probs[offset : offset + len(b)])
                    self.metrics.rows_scored += len(b)
                offset += len(b)
        if total > 0 and weight_sum > 0:
            self.optim.zero_grad()
            if logits is not None and local:
                weights = torch.cat(
                    [
                        torch.full((len(b),), self._loss_weight(n) if self._trains_on(n) else 0.0)
                        for n, b in parts
                    ]
                ).to(self.device)
                losses = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, labels, reduction="none"
                )
                loss = (losses * weights).sum() / total
                loss.backward()  # type: ignore[no-untyped-call]
            self.group.sum_gradients(self.model)
            self.optim.step(lr_scale=lr_sum / total)
        for _, b in trained_rows:
            if b.event_time_ms is not None and len(b):
                self.metrics.watermark_ms = max(self.metrics.watermark_ms, int(b.event_time_ms.max()))
        now_ms = self._clock_ms()
        for n, b in parts:
            if self._trains_on(n):
                self.metrics.rows_trained[n] = self.metrics.rows_trained.get(n, 0) + len(b)
                if n == stream_name and b.event_time_ms is not None:
                    age = (now_ms - b.event_time_ms.numpy()).clip(min=0) / 1000.0
                    self.freshness.add(age.astype(np.float64))

    def _checkpoint(self, policy: MixPolicy) -> None:
        self._take_commands()  # every savepoint asked for until now is covered by this checkpoint
        feeds = {name: feed.state() for name, feed in self.feeds.items()}
        mine = {
            "mixer": policy.state_dict(),
            "scores": self.scores.state_dict(),
            "freshness": self.freshness.state_dict(),
            "metrics": self.metrics.state_dict(),
            "feeds": feeds,
        }
        ranks = self.group.gather(mine)
        if self.group.leader:  # every replica holds the same model: one copy is written
            state = {"model": self.model.state_dict(), "optim": self.optim.state_dict(), "ranks": ranks}
            self.checkpoints.save(self.step, state)
        self.group.barrier()  # durable before any trainer commits its offsets
        stream = self._stream_feed()
        if stream is not None:
            stream.source.commit(feeds[stream.name]["offsets"])
        self._savepoints_covered()

    def _publish(self) -> None:
        if not self.group.leader:
            return
        self.publisher.publish(
            self.model.state_dict(),
            {"step": self.step, "watermark": _iso(self.metrics.watermark_ms), "metrics": self.summary()},
        )

    def run(self) -> dict[str, Any]:
        spec = self.training.spec
        states = self.restore()
        started = time.monotonic()
        elapsed_before = self.metrics.elapsed_s
        try:
            if self.options.feeds is not None:
                self.feeds.update(self.options.feeds)
            else:
                self._open_feeds(states)
            policy = self._policy()
            if self._mixer_state is not None:
                policy.load_state_dict(self._mixer_state)
            last_ckpt = last_pub = last_progress = time.monotonic()
            while self.options.max_steps is None or self.step < self.options.max_steps:
                if self.options.until is not None and self.options.until(self):
                    break
                self._update_gate()
                guard, lag, age = self._guard()
                active = [n for n, f in self.feeds.items() if not f.exhausted()]
                parts: list[tuple[str, TensorBatch]] = []
                step_plan = None
                if active:
                    # Every feed is asked for a whole step's rows, whatever its share: what a feed can
                    # offer then depends only on the data, not on how batches were cut or polled.
                    with self._waiting():
                        available = {
                            n: min(spec.batch_size, self.feeds[n].available(spec.batch_size)) for n in active
                        }
                        step_plan = policy.plan(available, active, guard=guard)
                        parts = [(n, b) for n, r in step_plan.rows.items() for b in self.feeds[n].take(r)]
                now = time.monotonic()
                ck, pub = spec.checkpoint, spec.publish
                next_step = self.step + 1
                ckpt_due = (ck.every_steps and next_step % ck.every_steps == 0) or (
                    ck.every_s and now - last_ckpt >= ck.every_s
                )
                pub_due = (pub.every_steps and next_step % pub.every_steps == 0) or (
                    pub.every_s and now - last_pub >= pub.every_s
                )
                trained = [
                    (self._lr_multiplier(n), self._loss_weight(n), len(b))
                    for n, b in parts
                    if self._trains_on(n)
                ]
                # One agreement per step between trainers (the identity with one): who is still
                # active, rows, the loss and learning-rate weights, and rank 0's timers.
                ctl = self.group.sum(
                    [
                        float(bool(active)),
                        float(sum(len(b) for _, b in parts)),
                        float(sum(r for _, _, r in trained)),
                        float(sum(m * r for m, _, r in trained)),
                        float(sum(w * r for _, w, r in trained)),
                        float(bool(ckpt_due) and self.group.leader),
                        float(bool(pub_due) and self.group.leader),
                    ]
                )
                if ctl[0] == 0:
                    break
                if ctl[1] == 0:
                    stream = self._stream_feed()
                    if not self.options.follow:
                        if all(f.exhausted() for f in self.feeds.values()):
                            continue  # found out just now (a resumed, finished pass): agree and stop
                        raise RuntimeError(f"no source can supply rows (active: {active})")
                    with self._waiting():
                        if stream is not None:
                            stream.source.wait(0.5)  # an idle stream while following: wait for events
                        else:
                            time.sleep(0.2)  # an open graph waiting for its next window
                    self._between_steps(policy)
                    metrics = self.reporter.extra.get("metrics") if self.reporter is not None else None
                    if self.reporter is not None and (metrics or {}).get("steps") != self.step:
                        self.reporter.extra["metrics"] = self.summary(brief=True)  # idle: the final figures
                    continue
                with self._computing():
                    self._train_step(parts, global_trained=ctl[2], lr_weighted=ctl[3], loss_weighted=ctl[4])
                self.step += 1
                if self.reporter is not None:
                    self.reporter.rows += int(ctl[1])
                    self.reporter.extra["step"] = self.step
                # Traced before anything can checkpoint (a savepoint below): a checkpoint that holds
                # this step while a kill lost its trace line would read as rows never trained.
                if self.options.trace is not None:
                    self.options.trace(self.step, parts)
                self._between_steps(policy)
                if step_plan is not None:
                    self._account(step_plan.rows, step_plan.deferred, guard, lag, age)
                self.metrics.elapsed_s = elapsed_before + (now - started)
                if ctl[5]:
                    self._checkpoint(policy)
                    last_ckpt = now
                if ctl[6]:
                    self._publish()
                    last_pub = now
                if now - last_progress >= self.options.progress_every_s:
                    brief = self.summary(brief=True)
                    if self.options.progress is not None:
                        self.options.progress(brief)
                    if self.reporter is not None:  # the master shows it: AUC, freshness, samples/s
                        self.reporter.extra["metrics"] = brief
                    last_progress = now
            self.metrics.elapsed_s = elapsed_before + (time.monotonic() - started)
            self._checkpoint(policy)
            self._publish()
            result = self._merged_summary()
            if spec.evaluation.holdout is not None:
                result["holdout"] = self._evaluate_holdout()
            if self.reporter is not None:
                # close() sends it: the master keeps it as the job's figures, so it must be these,
                # not the last periodic progress (which lags the end by up to progress_every_s).
                self.reporter.extra["metrics"] = self.summary(brief=True)
                self.reporter.extra["step"] = self.step
                self.reporter.extra["final"] = True
            return result
        finally:
            self.close()

    def _waiting(self) -> contextlib.AbstractContextManager[None]:
        return self.reporter.waiting() if self.reporter is not None else contextlib.nullcontext()

    def _computing(self) -> contextlib.AbstractContextManager[None]:
        return self.reporter.computing() if self.reporter is not None else contextlib.nullcontext()

    def _between_steps(self, policy: MixPolicy) -> None:
        """Apply what the backend and the master asked for since the last step: a new allotment
        (thread pools follow it, no restart) and savepoints (a checkpoint now, acknowledged by id)."""
        granted = self.allotment.poll()
        if granted is not None:
            self.allotment.apply_threads(granted)
        if self.reporter is None:
            return
        self._take_commands()
        if self._savepoints_waiting:  # one checkpoint for all of them, however many arrived
            self._checkpoint(policy)
            self.reporter.report()

    def _take_commands(self) -> None:
        """Savepoint ids from the master join the waiting set; one already covered is answered by
        the cumulative report again (the master re-sends what it has not seen acknowledged)."""
        if self.reporter is None:
            return
        covered = {i for group in self._savepoints_done for i in group["ids"]}
        while not self.reporter.commands.empty():
            command = self.reporter.commands.get_nowait()
            if command.get("type") == "savepoint" and command.get("id") is not None:
                sp = str(command["id"])
                if sp not in covered:
                    self._savepoints_waiting[sp] = None

    def _savepoints_covered(self) -> None:
        """A checkpoint is durable: it covers every waiting savepoint. The report keeps the newest
        SAVEPOINTS_REPORTED ids, enough for any burst the master has outstanding at once."""
        if self.reporter is None:
            return
        name = self.checkpoints.path_for(self.step).name
        self.reporter.extra["checkpoint"] = {"step": self.step, "id": name}
        if not self._savepoints_waiting:
            return
        self._savepoints_done.append(
            {"checkpoint": name, "step": self.step, "ids": list(self._savepoints_waiting)}
        )
        self._savepoints_waiting = {}
        excess = sum(len(g["ids"]) for g in self._savepoints_done) - SAVEPOINTS_REPORTED
        while excess > 0:
            oldest = self._savepoints_done[0]
            if len(oldest["ids"]) <= excess:
                excess -= len(oldest["ids"])
                del self._savepoints_done[0]
            else:
                self._savepoints_done[0] = {**oldest, "ids": oldest["ids"][excess:]}
                excess = 0
        # A new list each time: the reporter thread may be serialising the previous one.
        self.reporter.extra["savepoints_done"] = list(self._savepoints_done)

    def _account(
        self, rows: dict[str, int], deferred: dict[str, int], guard: bool, lag: int, age: float
    ) -> None:
        m = self.metrics
        for n, r in deferred.items():
            m.deferred[n] = m.deferred.get(n, 0) + r
        m.guard_steps += int(guard)
        m.window_guard += int(guard)
        for n, r in rows.items():
            m.window_rows[n] = m.window_rows.get(n, 0) + r
        if self.step % self.training.spec.mixing.window_steps == 0:
            total = sum(m.window_rows.values()) or 1
            m.windows.append(
                {
                    "step": self.step,
                    "shares": {n: round(r / total, 4) for n, r in sorted(m.window_rows.items())},
                    "guard_steps": m.window_guard,
                    "lag_records": lag,
                    "event_age_s": round(age, 3),
                    "deferred": dict(m.deferred),
                }
            )
            del m.windows[:-1000]
            m.window_rows, m.window_guard = {}, 0

    def _evaluate_holdout(self) -> dict[str, Any]:
        holdout = self.training.spec.evaluation.holdout
        assert holdout is not None
        graph = plan(self.data, holdout.start, holdout.end)
        log_ = ScoreLog()
        token = new_token()
        spec_path = self._spec_path()
        self.model.eval()
        for source in self.data.spec.sources:
            if not isinstance(source, FileSource):
                continue
            tasks = [t for t in graph.tasks if t.source == source.name]
            if not tasks:
                continue
            feed = FileFeed(
                f"holdout-{source.name}",
                tasks,
                [],
                spec_path=spec_path,
                token=token,
                sparse=self.sparse_cols,
                dense=self.dense_cols,
            )
            try:
                with torch.no_grad():
                    while feed.available(4096):
                        for b in feed.take(4096):
                            p = torch.sigmoid(self.model(b.sparse.to(self.device), b.dense.to(self.device)))
                            log_.append(b.labels.numpy(), p.float().cpu().numpy())
            finally:
                feed.close()
        return {"rows": len(log_), "auc": _round(log_.auc()), "logloss": _round(log_.logloss())}

    def summary(self, brief: bool = False) -> dict[str, Any]:
        m = self.metrics
        window = self.training.spec.evaluation.window_rows
        out: dict[str, Any] = {
            "mode": self.mode,
            "steps": self.step,
            "rows_trained": dict(m.rows_trained),
            "rows_scored": m.rows_scored,
            "progressive": {
                "auc": _round(self.scores.auc()),
                "logloss": _round(self.scores.logloss()),
                "window_auc": _round(self.scores.window_auc(window)),
                "window_logloss": _round(self.scores.window_logloss(window)),
            },
            "freshness_s": {
                "p50": _round(self.freshness.quantile(0.5)),
                "p99": _round(self.freshness.quantile(0.99)),
            },
            "dead_lettered": self._dead_lettered(),
            "stream": self._stream_health(),
            "deferred": dict(m.deferred),
            "guard_steps": m.guard_steps,
            "watermark": _iso(self.metrics.watermark_ms),
            "elapsed_s": round(m.elapsed_s, 3),
            "samples_per_s": round(sum(m.rows_trained.values()) / m.elapsed_s, 1) if m.elapsed_s else None,
        }
        if not brief:
            out["windows"] = m.windows[-20:]
        return out

    def _merged_summary(self) -> dict[str, Any]:
        """The job's metrics: this trainer's, or with several the sum and union of all of theirs."""
        if self.group.world == 1:
            return self.summary()
        m = self.metrics
        mine = {
            "rows_trained": m.rows_trained,
            "rows_scored": m.rows_scored,
            "deferred": m.deferred,
            "guard_steps": m.guard_steps,
            "scores": self.scores.state_dict(),
            "freshness": self.freshness.state_dict()["sample"],
            "dead_lettered": self._dead_lettered(),
            "model_sha256": _digest(self.model),
        }
        everyone = self.group.gather(mine)
        out = self.summary()
        scores, fresh = ScoreLog(), Percentiles(seed=self.training.spec.seed)
        rows: dict[str, int] = {}
        deferred: dict[str, int] = {}
        for r in everyone:
            scores.append(r["scores"]["labels"], r["scores"]["probs"])
            fresh.add(np.asarray(r["freshness"], dtype=np.float64))
            for n, v in r["rows_trained"].items():
                rows[n] = rows.get(n, 0) + v
            for n, v in r["deferred"].items():
                deferred[n] = deferred.get(n, 0) + v
        window = self.training.spec.evaluation.window_rows
        out.update(
            trainers=self.group.world,
            # Every replica applied the same summed gradients: a difference here is a bug, not noise.
            replicas_identical=len({r["model_sha256"] for r in everyone}) == 1,
            rows_trained=rows,
            rows_scored=sum(r["rows_scored"] for r in everyone),
            deferred=deferred,
            guard_steps=max(r["guard_steps"] for r in everyone),
            dead_lettered=sum(r["dead_lettered"] for r in everyone),
            progressive={
                "auc": _round(scores.auc()),
                "logloss": _round(scores.logloss()),
                "window_auc": _round(scores.window_auc(window)),
                "window_logloss": _round(scores.window_logloss(window)),
            },
            freshness_s={"p50": _round(fresh.quantile(0.5)), "p99": _round(fresh.quantile(0.99))},
            samples_per_s=round(sum(rows.values()) / m.elapsed_s, 1) if m.elapsed_s else None,
        )
        return out

    def _stream_health(self) -> dict[str, Any] | None:
        stream = self._stream_feed()
        return stream.source.health() if stream is not None else None

    def _dead_lettered(self) -> int:
        stream = self._stream_feed()
        return stream.source.malformed_seen() if stream is not None else 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.reporter is not None:
            self.reporter.close()
        for feed in self.feeds.values():
            try:
                feed.close()
            except Exception:  # close everything even if one fails
                log.exception("closing feed %s", feed.name)
        self.group.close()


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _share(tasks: list[Task], rank: int, world: int) -> list[Task]:
    """This trainer's tasks. Within each time group the largest tasks go first, each to the trainer
    with the fewest rows so far: every trainer gets a slice of every hour or day and about the same
    number of rows, whatever the task sizes. Deterministic, so every trainer computes the same split."""
    if world == 1:
        return tasks
    load = [0] * world
    mine: list[Task] = []
    by_group: dict[str, list[Task]] = {}
    for t in tasks:
        by_group.setdefault(t.group, []).append(t)
    for group in sorted(by_group):
        for t in sorted(by_group[group], key=lambda t: (-(t.rows or 0), t.task_id)):
            owner = min(range(world), key=lambda r: (load[r], r))
            load[owner] += t.rows or 1
            if owner == rank:
                mine.append(t)
    return mine


def _round(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def _iso(ms: int) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


def default_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="primus-train-"))


def print_progress(summary: Mapping[str, Any]) -> None:
    p = summary["progressive"]
    print(
        f"step {summary['steps']:>7}  trained {summary['rows_trained']}  auc {p['window_auc']}  "
        f"freshness p99 {summary['freshness_s']['p99']}s  dead-lettered {summary['dead_lettered']}",
        file=sys.stderr,
        flush=True,
    )
