"""The hybrid training runtime: one update process over file sources and a Kafka stream.

Each step the mixer decides rows per source; the rows are concatenated, scored, and the model is
updated with per-source loss weights and a learning-rate scale blended from the sources' multipliers.
Stream rows are scored *before* the update that trains on them (progressive validation), so every
mode is evaluated identically: ``batch`` scores the stream but never trains on it (nor lets it change
what history is trained: no freshness guard, full history steps), ``stream`` trains on the stream
only (history is not read), ``mixed`` trains on both.

Checkpoints hold the model, the optimizers, the mixer, the metrics and every feed's position (the
data service's progress plus untrained buffered rows; the stream's first untrained offsets). Kafka
offsets are committed to the consumer group only after a checkpoint is durable, and a restart
continues from the newest checkpoint with no row lost and none trained twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.contracts.training import (
    PrimusTraining,
    check_against,
    feature_columns,
    kafka_sources,
    stream_source,
)
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.errors import one_line
from airflow_provider_primus.process import ERROR_LIMIT
from airflow_provider_primus.resources.allotment import AllotmentWatcher
from airflow_provider_primus.training.assembly import assemble_model
from airflow_provider_primus.training.checkpoints.objects import checkpoint_store_for, publisher_for
from airflow_provider_primus.training.checkpoints.regroup import cut_progress, regroup
from airflow_provider_primus.training.checkpoints.savepoints import Savepoints
from airflow_provider_primus.training.checkpoints.served import MODEL_RECORD
from airflow_provider_primus.training.checkpoints.shards import load_model_state, model_state, prune_shards
from airflow_provider_primus.training.clock import ClockSwitch, TrainingClock
from airflow_provider_primus.training.control import LocalStep, StepControl, StepTimers
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.feeds.feed import Feed, StreamFeed
from airflow_provider_primus.training.feeds.guard import freshness_guard, update_gate
from airflow_provider_primus.training.feeds.holdout import evaluate_holdout
from airflow_provider_primus.training.feeds.mixer import MixPolicy, policy_for
from airflow_provider_primus.training.feeds.replay import is_replay
from airflow_provider_primus.training.feeds.setup import open_feeds, open_replay, participants
from airflow_provider_primus.training.gpu import (
    BatchStager,
    process_group_backend,
    trainer_device,
)
from airflow_provider_primus.training.metrics import Percentiles, ScoreLog
from airflow_provider_primus.training.options import TrainOptions
from airflow_provider_primus.training.rendezvous import meet_through_master
from airflow_provider_primus.training.reporter import JobReporter
from airflow_provider_primus.training.sharding import full_state_dict
from airflow_provider_primus.training.stream.event_policy import sane_watermark, watermark_allowance_s
from airflow_provider_primus.training.summary import (
    TrainMetrics,
    contribution,
    iso_ms,
    merge_summaries,
    summarize,
)
from airflow_provider_primus.training.update import SourceWeights, Updater

log = logging.getLogger(__name__)

__all__ = ["TrainOptions", "Trainer"]  # TrainOptions: defined beside the executor options


class Trainer:
    def __init__(self, data: PrimusData, training: PrimusTraining, options: TrainOptions) -> None:
        check_against(training, data)
        self.data, self.training, self.options = data, training, options
        spec = training.spec
        self.mode = options.mode or spec.mode
        self.device = trainer_device(spec.device, options.rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL and the copy stream use the current device
        self.sparse_cols, self.dense_cols = feature_columns(data)
        torch.manual_seed(spec.seed)
        cores = max(1, (os.cpu_count() or 1) - spec.data_executors)
        torch.set_num_threads(spec.threads or max(1, cores // options.trainers))
        self.reporter: JobReporter | None = None
        self.allotment = AllotmentWatcher()
        granted = self.allotment.current()
        if granted is not None:
            self.allotment.apply_threads(granted)
        if options.dispatcher is not None:
            client = DispatcherClient(options.dispatcher, options.token or "", grace_s=options.grace_s)
            self.reporter = JobReporter(client, options.executor_name).start()
        if self.reporter is not None and options.trainers > 1 and options.dist_init is None:
            self.group = meet_through_master(self.reporter.client, options, self.device.type)
        else:
            self.group = Group(
                options.rank,
                options.trainers,
                options.dist_init,
                backend=process_group_backend(self.device.type),
            )
        built = assemble_model(
            training,
            data,
            columns=(self.sparse_cols, self.dense_cols),
            rank=self.group.rank,
            world=self.group.world,
            device=self.device,
        )
        self.model, self.model_record, self.optim = built.model, built.record, built.optim
        self.placement = built.placement
        self.device = self.placement.dense
        self.workdir = options.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A local directory, or s3://… (manifest-committed objects: training/checkpoints/objects.py).
        self.checkpoints = checkpoint_store_for(
            spec.checkpoint.dir or self.workdir / "checkpoints", spec.checkpoint.keep, spec.checkpoint.storage
        )
        self.publisher = publisher_for(
            spec.publish.dir or self.workdir / "model", spec.publish.keep, spec.publish.storage
        )
        self.stream_src = stream_source(training, data)
        self.scores = ScoreLog()
        self.freshness = Percentiles(seed=spec.seed)
        self.metrics = TrainMetrics()
        self.clock = TrainingClock(spec.mixing.freshness)
        self.step = 0
        self.feeds: dict[str, Feed] = {}
        self._mixer_state: dict[str, Any] | None = None  # from a checkpoint, applied once feeds exist
        self._data_spec_path: Path | None = options.spec_path
        # Where the data service resumes (the union of every trainer's files progress in the
        # checkpoint): the leader rewinds it there before any trainer reads.
        self._cut: dict[str, Any] = {}
        self._closed = False
        self._failed = False  # a failed run leaves its trainer group without draining it
        self.savepoints = Savepoints(self.reporter)
        self.weights = SourceWeights(
            self.mode, frozenset(s.name for s in kafka_sources(data)), spec.mixing.sources
        )
        self.updater = Updater(
            self.model,
            self.optim,
            self.group,
            self.device,
            self.weights,
            scores=self.scores,
            freshness=self.freshness,
            metrics=self.metrics,
            clock_ms=self._clock_ms,
            event_times={s.name: s.schema_.event_time for s in data.spec.sources if s.schema_.event_time},
            stager=BatchStager(self.placement),
        )

    def _clock_ms(self) -> int:
        return self.clock.now_ms(self.metrics.watermark_ms)

    # -- set-up ------------------------------------------------------------------------------------

    def _spec_path(self) -> Path:
        """The data document on disk for the executors: the caller's, else written once here."""
        if self._data_spec_path is None:
            path = self.workdir / "primus-data.yaml"
            path.write_text(
                yaml.safe_dump(self.data.model_dump(mode="json", by_alias=True, exclude_none=True))
            )
            self._data_spec_path = path
        return self._data_spec_path

    def _job_event(self, type_: str, message: str, data: dict[str, Any]) -> None:
        """The trainer's events (the stream's outages, recoveries and offset resets; the clock's
        switch) become the job's events."""
        if self.reporter is not None:
            self.reporter.event(type_, message, data)
        if self.options.on_event is not None:
            self.options.on_event(type_, message, data)

    def _clock_switched(self, switch: ClockSwitch | None) -> None:
        """``clock: auto`` chose the wall clock: a job event, since every figure after it (freshness,
        the guard's event age) is measured differently."""
        if switch is not None:
            log.info("%s", switch.message())
            self._job_event(EventType.CLOCK_SWITCHED.value, switch.message(), switch.payload())

    def restore(self) -> dict[str, Any]:
        found = self.checkpoints.latest() if self.options.resume else None
        if found is None:
            return {}
        step, state = found
        written = len(state["ranks"])
        if written != self.group.world and self.options.dispatcher is None:
            raise RuntimeError(
                f"the checkpoint at step {step} was written by {written} trainer(s); resume it with "
                f"as many (this run has {self.group.world}; a job's trainers regroup at a checkpoint)"
            )
        # Checkpoints from before ``model.dense_transform`` were trained on the raw values.
        trained_with = state.get("dense_transform", "none")
        if trained_with != self.model.dense_transform:
            raise RuntimeError(
                f"the checkpoint at step {step} was trained with model.dense_transform: {trained_with}; "
                f"this training spec says {self.model.dense_transform}: set it to {trained_with} to "
                "resume it (or start afresh with another checkpoint.dir)"
            )
        ranks = regroup(state["ranks"], self.group.world)
        mine = ranks[self.group.rank]
        self.step = step
        load_model_state(self.model, self.optim, state, self.checkpoints, step)  # re-shards row-wise tables
        if mine.get("scores") is not None:  # absent: a rank the group did not have before
            self.scores.load_state_dict(mine["scores"])
            self.freshness.load_state_dict(mine["freshness"])
            self.metrics.load_state_dict(mine["metrics"])
            allowance = watermark_allowance_s(s.event_time_policy for s in kafka_sources(self.data))
            self.metrics.watermark_ms = sane_watermark(self.metrics.watermark_ms, allowance)
        self.clock.load_state_dict(mine.get("clock"))  # absent: written before ``clock: auto``
        self._mixer_state = mine["mixer"]
        names = {n for r in ranks for n, f in r["feeds"].items() if f is not None and "progress" in f}
        self._cut = {n: cut_progress(r["feeds"].get(n) for r in ranks) for n in names}
        log.info("resumed from checkpoint at step %d (written by %d trainer(s))", step, written)
        return dict(mine["feeds"])

    # -- the loop ----------------------------------------------------------------------------------

    def _stream_feed(self) -> StreamFeed | None:
        """The stream the freshness guard watches (``stream_source``)."""
        if self.stream_src is None:
            return None
        feed = self.feeds.get(self.stream_src.name)
        return feed if isinstance(feed, StreamFeed) else None

    def _stream_feeds(self) -> list[StreamFeed]:
        """Every stream this trainer reads (one per Kafka source), each with its own offsets."""
        return [f for f in self.feeds.values() if isinstance(f, StreamFeed)]

    def _checkpoint(self, policy: MixPolicy) -> None:
        self.savepoints.take()  # every savepoint asked for until now is covered by this checkpoint
        feeds = {name: feed.state() for name, feed in self.feeds.items()}
        mine = {
            "mixer": policy.state_dict(),
            "scores": self.scores.state_dict(),
            "freshness": self.freshness.state_dict(),
            "metrics": self.metrics.state_dict(),
            "clock": self.clock.state_dict(),
            "feeds": feeds,
        }
        # Each trainer's row-wise shards are written here, before the gather that is their barrier.
        state = model_state(self.model, self.optim, self.checkpoints, self.step)
        ranks = self.group.gather(mine)
        if self.group.leader:  # the dense part is the same on every trainer: one copy is written
            self.checkpoints.save(
                self.step, {**state, "ranks": ranks, "dense_transform": self.model.dense_transform}
            )
            prune_shards(self.checkpoints)
        self.group.barrier()  # durable before any trainer commits its offsets
        for stream in self._stream_feeds():
            stream.source.commit(feeds[stream.name]["offsets"])
        self.savepoints.covered(self.checkpoints.path_for(self.step).name, self.step)

    def _publish(self) -> None:
        model = full_state_dict(self.model)  # row-wise tables gathered whole: every trainer calls it
        if not self.group.leader:
            return
        self.publisher.publish(
            model,
            {
                "step": self.step,
                "watermark": iso_ms(self.metrics.watermark_ms),
                "metrics": self.summary(),
                MODEL_RECORD: self.model_record,
            },
        )

    def run(self) -> dict[str, Any]:
        states = self.restore()
        started = time.monotonic()
        elapsed_before = self.metrics.elapsed_s
        try:
            policy = self._start(states)
            stream = self._stream_feed()
            if self.reporter is not None and stream is not None:
                self.reporter.live_metrics["stream"] = stream.source.health
            now = time.monotonic()
            timers = StepTimers(started, elapsed_before, checkpoint=now, publish=now, progress=now)
            while self._may_step():
                step = self._next_step_plan(policy)
                agreed = self._agree(step, timers)
                if agreed.active == 0:
                    break
                if agreed.rows == 0:
                    # A savepoint of several trainers, or a regroup, while no rows come.
                    if agreed.checkpoint_due and (self.group.world > 1 or agreed.stop):
                        self._checkpoint(policy)
                    if agreed.stop:
                        return self._regrouped(elapsed_before, started)
                    self._idle(step, policy)
                    continue
                self._take_step(step, agreed, policy)
                self._after_step(step, agreed, policy, timers)
                if agreed.stop:
                    return self._regrouped(elapsed_before, started)
            self.metrics.elapsed_s = elapsed_before + (time.monotonic() - started)
            return self._finish(policy)
        except Exception as exc:
            self._failed = True
            if self.reporter is not None:  # the last report says why: a master that sees no file (a pod)
                self.reporter.extra["error"] = one_line(exc, ERROR_LIMIT)
            raise
        finally:
            self.close()

    def _start(self, states: Mapping[str, Any]) -> MixPolicy:
        """Open the feeds (or take the ready-made ones) and the mixer, at a checkpoint's state."""
        if self.options.feeds is not None:
            self.feeds.update(self.options.feeds)
        else:
            open_feeds(
                self.feeds,
                self.data,
                self.training.spec,
                self.options,
                names=participants(self.data, self.mode),
                columns=(self.sparse_cols, self.dense_cols),
                group=self.group,
                states=states,
                spec_path=self._spec_path,
                on_event=self._job_event,
                cut=self._cut,
            )
            if self.mode == "mixed":
                open_replay(
                    self.feeds,
                    self.data,
                    self.training.spec,
                    self.options,
                    columns=(self.sparse_cols, self.dense_cols),
                    group=self.group,
                    states=states,
                )
            if self.group.world > 1 and self.options.dispatcher is not None:
                self.group.barrier()  # the leader has rewound the shared data service: read now
        streams = {name: feed.stream for name, feed in self.feeds.items()}
        scored_only = [name for name in self.feeds if not self.weights.trains_on(name)]
        replays = [name for name in self.feeds if is_replay(name)]
        policy = policy_for(streams, self.data.spec.mixture, self.training.spec, scored_only, replays)
        if self._mixer_state is not None:
            policy.load_state_dict(self._mixer_state)
        return policy

    def _may_step(self) -> bool:
        """Another step, unless ``max_steps`` is reached or the caller's ``until`` says stop."""
        if self.options.max_steps is not None and self.step >= self.options.max_steps:
            return False
        return not (self.options.until is not None and self.options.until(self))

    def _next_step_plan(self, policy: MixPolicy) -> LocalStep:
        """This trainer's rows for the next step, as the mixer divides them between its feeds."""
        spec = self.training.spec
        freshness = spec.mixing.freshness
        self._clock_switched(self.clock.observe(self.step, self.metrics.watermark_ms))
        for each in self._stream_feeds():
            update_gate(each, self.feeds.values(), replay=self.clock.replay)
        guard, lag, age = freshness_guard(self._stream_feed(), freshness, self._clock_ms)
        # The guard protects a stream the model learns from: in batch mode the stream is only
        # scored, so history never gives way to it (its lag and age are still reported).
        stream = self._stream_feed()
        guard = guard and stream is not None and self.weights.trains_on(stream.name)
        active = [n for n, f in self.feeds.items() if not f.exhausted()]
        parts: list[tuple[str, TensorBatch]] = []
        mix = None
        if active:
            # Every feed is asked for a whole step's rows, whatever its share: what a feed can
            # offer then depends only on the data, not on how batches were cut or polled.
            with self._waiting():
                available = {
                    n: min(spec.batch_size, self.feeds[n].available(spec.batch_size)) for n in active
                }
                mix = policy.plan(available, active, guard=guard)
                parts = [(n, b) for n, r in mix.rows.items() for b in self.feeds[n].take(r)]
        return LocalStep(active, parts, mix, guard, lag, age, now=time.monotonic())

    def _agree(self, step: LocalStep, timers: StepTimers) -> StepControl:
        """One agreement per step between trainers (the identity with one): who is still active,
        rows, the loss and learning-rate weights, and rank 0's timers."""
        ck, pub = self.training.spec.checkpoint, self.training.spec.publish
        next_step = self.step + 1
        checkpoint_due = (ck.every_steps and next_step % ck.every_steps == 0) or (
            ck.every_s and step.now - timers.checkpoint >= ck.every_s
        )
        publish_due = (pub.every_steps and next_step % pub.every_steps == 0) or (
            pub.every_s and step.now - timers.publish >= pub.every_s
        )
        # With several trainers a savepoint is a checkpoint of all of them: it joins the agreement.
        savepoint = self.group.world > 1 and bool(self.savepoints.waiting)
        mine = StepControl.of(
            step,
            self.weights,
            checkpoint_due=(bool(checkpoint_due) and self.group.leader) or savepoint,
            publish_due=bool(publish_due) and self.group.leader,
            stop=self.savepoints.regroup,
        )
        return StepControl.from_vector(self.group.sum(mine.to_vector()))

    def _idle(self, step: LocalStep, policy: MixPolicy) -> None:
        """No trainer has rows this step: a finished pass found out just now goes round once more to
        agree and stop; a followed stream (or an open graph) is waited for; anything else is an error."""
        streams = self._stream_feeds()
        # Trainers sharing a job's data service can all be without rows for a moment (the rows are
        # still being read, or wait behind an ordered graph's barrier): they wait together.
        shared = self.group.world > 1 and self.options.dispatcher is not None
        if not self.options.follow and not shared:
            if all(f.exhausted() for f in self.feeds.values()):
                return  # found out just now (a resumed, finished pass): agree and stop
            raise RuntimeError(f"no source can supply rows (active: {step.active})")
        if shared and all(f.exhausted() for f in self.feeds.values()):
            return
        if any(s.gate_ms is not None and s.source.buffered() > 0 for s in streams):
            # The replay holds back stream records the history cannot reach now (an open graph
            # waiting for its next window): under ``auto`` the data is live.
            self._clock_switched(self.clock.history_idle(self.step, self.metrics.watermark_ms))
        with self._waiting():
            for stream in streams:  # idle streams while following: wait for events
                stream.source.wait(0.5 / len(streams))
            if not streams and not shared:  # (a shared data service's feeds waited for rows already)
                time.sleep(0.2)  # an open graph waiting for its next window
        self._between_steps(policy)
        metrics = self.reporter.extra.get("metrics") if self.reporter is not None else None
        if self.reporter is not None and (metrics or {}).get("steps") != self.step:
            self.reporter.extra["metrics"] = self.summary(brief=True)  # idle: the final figures

    def _take_step(self, step: LocalStep, agreed: StepControl, policy: MixPolicy) -> None:
        """Train the step's rows and account for them."""
        with self._computing():
            self.updater.step(
                step.parts,
                global_trained=agreed.trained_rows,
                lr_weighted=agreed.lr_weighted,
                dense_lr_weighted=agreed.dense_lr_weighted,
                loss_weighted=agreed.loss_weighted,
            )
        self.step += 1
        if self.reporter is not None:
            self.reporter.rows += int(agreed.rows)
            self.reporter.extra["step"] = self.step
        # Traced before anything can checkpoint (a savepoint below): a checkpoint that holds
        # this step while a kill lost its trace line would read as rows never trained.
        if self.options.trace is not None:
            self.options.trace(self.step, step.parts)
        self._between_steps(policy)
        if step.mix is not None:
            self.metrics.account(
                self.step,
                step.mix.rows,
                step.mix.deferred,
                guard=step.guard,
                lag=step.lag,
                age=step.age,
                window_steps=self.training.spec.mixing.window_steps,
            )

    def _after_step(
        self, step: LocalStep, agreed: StepControl, policy: MixPolicy, timers: StepTimers
    ) -> None:
        """What the agreed timers call for: a checkpoint, a published snapshot, a progress report."""
        now = step.now
        self.metrics.elapsed_s = timers.elapsed_before + (now - timers.started)
        if agreed.checkpoint_due:
            self._checkpoint(policy)
            timers.checkpoint = now
        if agreed.publish_due:
            self._publish()
            timers.publish = now
        if now - timers.progress >= self.options.progress_every_s:
            brief = self.summary(brief=True)
            if self.options.progress is not None:
                self.options.progress(brief)
            if self.reporter is not None:  # the master shows it: AUC, freshness, samples/s
                self.reporter.extra["metrics"] = brief
            timers.progress = now

    def _finish(self, policy: MixPolicy) -> dict[str, Any]:
        """The last checkpoint and snapshot, and the run's result."""
        self._checkpoint(policy)
        self._publish()
        result = self._merged_summary()
        holdout = self.training.spec.evaluation.holdout
        if holdout is not None:
            result["holdout"] = evaluate_holdout(
                self.data,
                holdout,
                self.model,
                self.device,
                spec_path=self._spec_path(),
                sparse=self.sparse_cols,
                dense=self.dense_cols,
            )
        if self.reporter is not None:
            # close() sends it: the master keeps it as the job's figures, so it must be these,
            # not the last periodic progress (which lags the end by up to progress_every_s).
            self.reporter.extra["metrics"] = self.summary(brief=True)
            self.reporter.extra["step"] = self.step
            self.reporter.extra["final"] = True
        return result

    def _regrouped(self, elapsed_before: float, started: float) -> dict[str, Any]:
        """Stopped at the checkpoint just written, for the master to start the next group there."""
        self.metrics.elapsed_s = elapsed_before + (time.monotonic() - started)
        log.info("stopped at the checkpoint of step %d: the job's trainers regroup", self.step)
        if self.reporter is not None:
            self.reporter.extra["step"] = self.step
            self.reporter.extra["regrouped"] = True
        return {"regrouped": True, "steps": self.step}

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
        self.savepoints.take()
        # One checkpoint for all of them, however many arrived; several trainers agree on it first.
        if self.savepoints.waiting and self.group.world == 1:
            self._checkpoint(policy)
            self.reporter.report()

    # -- figures -------------------------------------------------------------------------------------

    def summary(self, brief: bool = False) -> dict[str, Any]:
        out = summarize(
            mode=self.mode,
            steps=self.step,
            metrics=self.metrics,
            scores=self.scores,
            freshness=self.freshness,
            window_rows=self.training.spec.evaluation.window_rows,
            dead_lettered=self._dead_lettered(),
            stream=self._stream_health(),
            brief=brief,
        )
        out["clock"] = self.clock.summary()  # which clock the freshness figures were measured on
        return out

    def _merged_summary(self) -> dict[str, Any]:
        """The job's metrics: this trainer's, or with several the sum and union of all of theirs."""
        if self.group.world == 1:
            return self.summary()
        mine = contribution(self.metrics, self.scores, self.freshness, self._dead_lettered(), self.model)
        everyone = self.group.gather(mine)
        return merge_summaries(
            self.summary(),
            everyone,
            seed=self.training.spec.seed,
            window_rows=self.training.spec.evaluation.window_rows,
            elapsed_s=self.metrics.elapsed_s,
        )

    def _stream_health(self) -> dict[str, Any] | None:
        stream = self._stream_feed()
        return stream.source.health() if stream is not None else None

    def _dead_lettered(self) -> int:
        return sum(stream.source.malformed_seen() for stream in self._stream_feeds())

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
        self.group.close(drain=not self._failed)
