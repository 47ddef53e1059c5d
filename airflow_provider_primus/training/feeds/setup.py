"""Which feeds a trainer reads and how each is opened: one per files source (its share of the planned
file tasks, or the master's data service for a job's trainer) and one per Kafka source (its share of
that topic's partitions).

Separate from the loop: the split between trainers and the wiring to the data service change with the
deployment, not with how steps are mixed and trained.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from airflow_provider_primus.contracts.data import PrimusData, is_history
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.contracts.training import TrainingSpec, replay_source
from airflow_provider_primus.credentials import new_token
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.sources.kafka_client import consumer as kafka_consumer
from airflow_provider_primus.training.distributed import Group
from airflow_provider_primus.training.feeds.feed import Feed, FileFeed, StreamFeed
from airflow_provider_primus.training.feeds.replay import REPLAY_SUFFIX, ReplayFeed, is_replay
from airflow_provider_primus.training.stream.fetch import EventSink
from airflow_provider_primus.training.stream.source import StreamSource

log = logging.getLogger(__name__)

__all__ = ["FeedOptions", "open_feeds", "open_replay", "participants", "share", "stream_partitions"]


class FeedOptions(Protocol):
    """The trainer options that decide how feeds open (``TrainOptions`` carries them)."""

    passthrough: Sequence[str]
    follow: bool
    dispatcher: str | None
    token: str | None
    open_graph: bool
    grace_s: float


def participants(data: PrimusData, mode: str) -> list[str]:
    """Sources this mode reads: every files source in ``batch`` and ``mixed`` mode, every Kafka
    source in all modes (``batch`` mode still reads the streams, to score them)."""
    return [s.name for s in data.spec.sources if s.type == "kafka" or mode in ("batch", "mixed")]


def share(tasks: list[Task], rank: int, world: int) -> list[Task]:
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


def stream_partitions(source: KafkaSource) -> list[int]:
    consumer: Any = kafka_consumer(source, client_id="primus-meta")
    try:
        return sorted(consumer.partitions_for_topic(source.topic) or [])
    finally:
        consumer.close()


def open_feeds(
    into: dict[str, Feed],
    data: PrimusData,
    spec: TrainingSpec,
    options: FeedOptions,
    *,
    names: list[str],
    columns: tuple[list[str], list[str]],
    group: Group,
    states: Mapping[str, Any],
    spec_path: Callable[[], Path],
    on_event: EventSink,
    cut: Mapping[str, Any] | None = None,
) -> None:
    """Open the feeds of ``names`` (one per source) into ``into`` (so that whatever opened before a
    failure is closed with the trainer). ``columns``: the sparse and dense feature columns;
    ``states``: the feeds' checkpointed positions; ``spec_path``: the data document on disk for the
    data executors; ``cut``: per files source, every trainer's progress together (a job's shared data service
    resumes there: its group's leader rewinds it, to every source's cut at once)."""
    sparse, dense = columns
    files = [s for s in data.spec.sources if is_history(s) and s.name in names]
    shuffle = (spec.mixing.shuffle.buffer_rows, spec.seed + 7919 * group.rank)
    # A job's trainers share its data service: the leader rewinds it to the checkpoint's cut, and
    # with several each claims the rows it receives, so a row reaches one of them only.
    # Without a job (``primus train --trainers N``) each hosts its own data service over a disjoint
    # share of the tasks: no trainer ever waits on another's acknowledgements (an ordered graph's
    # barriers would otherwise tie them together), and each keeps its own exact progress.
    if files and options.dispatcher is not None:
        # One data service for all of the job's files sources: one feed per source over one
        # connection, each with its own buffer and progress (task IDs never repeat across sources).
        rewind: dict[str, Any] = {}
        for source in files:
            state = states.get(source.name)
            rewind.update((cut or {}).get(source.name, (state or {}).get("progress") or {}))
        feeds = FileFeed.attach(
            [s.name for s in files],
            options.dispatcher,
            token=options.token or "",
            sparse=sparse,
            dense=dense,
            passthrough=options.passthrough,
            states={s.name: states.get(s.name) for s in files},
            open_graph=options.open_graph,
            grace_s=options.grace_s,
            shuffle=shuffle,
            rewind=rewind if group.leader else None,
            claim=group.world > 1,
        )
        for feed in feeds:
            into[feed.name] = feed
    elif files:
        window = data.spec.window
        if window is None:
            raise ValueError("training on files sources needs spec.window in the data document")
        graph = plan(data, window.start, window.end)
        if graph.missing:
            log.warning("missing partitions: %s", [m.path for m in graph.missing])
        for warning in graph.warnings:  # implausible event times: the trainer counts the rows too
            log.warning("%s", warning)
        path = spec_path()
        token = new_token()
        for source in files:
            source_tasks = [t for t in graph.tasks if t.source == source.name]
            tasks = share(source_tasks, group.rank, group.world)
            groups = {t.group for t in tasks}
            edges = [e for e in graph.edges if e[0] in groups and e[1] in groups]
            into[source.name] = FileFeed(
                source.name,
                tasks,
                edges,
                spec_path=path,
                token=token,
                sparse=sparse,
                dense=dense,
                passthrough=options.passthrough,
                executors=spec.data_executors,
                batch_rows=max(8192, spec.batch_size * 4),
                state=states.get(source.name),
                shuffle=shuffle,
            )
    for kafka in data.spec.sources:
        if isinstance(kafka, KafkaSource) and kafka.name in names:
            state = states.get(kafka.name)
            stream = _stream_feed(kafka, options, group=group, state=state, on_event=on_event)
            if stream is not None:
                into[kafka.name] = stream


def _stream_feed(
    source: KafkaSource,
    options: FeedOptions,
    *,
    group: Group,
    state: Mapping[str, Any] | None,
    on_event: EventSink,
) -> StreamFeed | None:
    """The feed of one Kafka source, at its checkpointed offsets; None when this trainer owns none of
    its partitions (more trainers than the topic has partitions: it trains on the other sources)."""
    mine = None
    if group.world > 1:  # partition p of each topic belongs to trainer p mod world
        count = len(stream_partitions(source))
        mine = [p for p in range(count) if p % group.world == group.rank]
        if not mine:
            return None
    offsets = (state or {}).get("offsets") or None  # none: nothing trained from it yet
    src = StreamSource(
        source,
        passthrough=options.passthrough,
        start_offsets={int(p): int(o) for p, o in offsets.items()} if offsets else None,
        bounded=not options.follow,
        partitions=mine,
        log_identity=(state or {}).get("log"),
        on_event=on_event,
    )
    if state:
        src.resume_counts(
            dead_lettered=int(state["dead_lettered"]),
            skipped_records=int(state.get("skipped_records", 0)),
        )
    return StreamFeed(source.name, src)


def open_replay(
    into: dict[str, Feed],
    data: PrimusData,
    spec: TrainingSpec,
    options: FeedOptions,
    *,
    columns: tuple[list[str], list[str]],
    group: Group,
    states: Mapping[str, Any],
) -> None:
    """Add the replay of history (``mixing.replay``) to the feeds opened, when it has something to
    accompany: a files source being trained and a stream. Its tasks are the data document's window,
    planned again here (a plan is deterministic and cached), so every trainer samples the same graph."""
    source = replay_source(spec, data)
    history = into.get(source) if source is not None else None
    streams = [f for f in into.values() if f.stream]
    if spec.mixing.replay.share == 0 or not isinstance(history, FileFeed) or not streams:
        return
    window = data.spec.window
    if window is None:
        log.warning("mixing.replay needs spec.window in the data document to sample from; not replaying")
        return
    found = next(s for s in data.spec.sources if s.name == source)
    assert is_history(found)
    tasks = [t for t in plan(data, window.start, window.end).tasks if t.source == source]
    primaries = [f for f in into.values() if not is_replay(f.name)]
    feed = ReplayFeed(
        found,
        tasks,
        position=lambda: history.window,
        finished=history.exhausted,
        primaries=lambda: any(not f.exhausted() for f in primaries),
        windows=spec.mixing.replay.windows,
        seed=spec.seed + 7919 * group.rank,
        sparse=columns[0],
        dense=columns[1],
        passthrough=options.passthrough,
        state=states.get(found.name + REPLAY_SUFFIX),
    )
    into[feed.name] = feed
