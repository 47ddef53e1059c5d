"""A checkpoint written by one trainer group, resumed by a group of another size.

A checkpoint is one consistent cut across the trainers that wrote it: the model (one copy, every
replica holds the same), and per trainer its data progress (the rows its loader was handed, the rows
it buffered untrained, the stream offsets of its partitions) and its own figures. A group of the same
size resumes it rank by rank. A group of another size (the job's trainers were scaled at this
checkpoint) cannot take over another trainer's buffers or shuffle pool, so the cut is re-cut:

* files: the rows *trained* (handed minus buffered) of every old trainer, as one progress, go to the
  new leader; rows that were buffered are served again. The data service's claims keep the other new
  trainers from taking a row twice whatever progress each starts from.
* stream: every partition's first untrained offset; each new trainer reads the partitions that are
  now its share (``p % world == rank``) from there.
* the figures (scores, freshness, metrics, clock) of old rank r go to new rank r; a new rank starts
  its own, and the figures of a rank that is gone leave the job's merged summary. Every mixer starts
  afresh: its feeds are not the ones it balanced before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_primus.data.service.intervals import IntervalSet
from airflow_provider_primus.data.tensors import TensorBatch

__all__ = ["cut_progress", "regroup", "trained_progress"]


def _buffered_batches(state: Mapping[str, Any]) -> list[TensorBatch]:
    out = list(state.get("buffered") or [])
    shuffle = state.get("shuffle")
    if shuffle:
        if shuffle.get("pool") is not None:
            out.append(shuffle["pool"])
        out += list(shuffle.get("pending") or [])
    return out


def trained_progress(state: Mapping[str, Any]) -> dict[str, list[tuple[int, int]]]:
    """A file feed's progress without the rows it held untrained (its buffer and shuffle pool)."""
    untrained: dict[str, IntervalSet] = {}
    for batch in _buffered_batches(state):
        if batch.positions is None or not len(batch):
            continue
        for origin, pos in zip(batch.row_origins().tolist(), batch.positions.tolist(), strict=True):
            untrained.setdefault(str(origin), IntervalSet()).add(int(pos), int(pos) + 1)
    out: dict[str, list[tuple[int, int]]] = {}
    for task, ranges in (state.get("progress") or {}).items():
        held = untrained.get(task)
        kept = [g for a, b in ranges for g in (held.missing(a, b) if held else [(a, b)])]
        if kept:
            out[task] = kept
    return out


def cut_progress(states: Iterable[Mapping[str, Any] | None]) -> dict[str, list[tuple[int, int]]]:
    """The union of several trainers' progress of one files source: the data service's position."""
    union: dict[str, IntervalSet] = {}
    for state in states:
        for task, ranges in ((state or {}).get("progress") or {}).items():
            rows = union.setdefault(task, IntervalSet())
            for a, b in ranges:
                rows.add(int(a), int(b))
    return {t: s.ranges() for t, s in union.items() if s.ranges()}


def _is_files(state: Mapping[str, Any]) -> bool:
    return "progress" in state


def _is_stream(state: Mapping[str, Any]) -> bool:
    return "offsets" in state


def regroup(ranks: Sequence[Mapping[str, Any]], world: int) -> list[dict[str, Any]]:
    """Per-rank states for a group of ``world`` trainers from those a group of ``len(ranks)`` wrote."""
    if len(ranks) == world:
        return [dict(r) for r in ranks]
    names = {n for r in ranks for n in (r.get("feeds") or {})}
    feeds: list[dict[str, Any]] = [{} for _ in range(world)]
    for name in sorted(names):
        states = [r["feeds"][name] for r in ranks if (r.get("feeds") or {}).get(name) is not None]
        if states and all(_is_files(s) for s in states):
            trained = [{"progress": trained_progress(s)} for s in states]
            feeds[0][name] = {
                "progress": cut_progress(trained),
                "buffered": [],
                "shuffle": None,
                "watermark_ms": max(int(s.get("watermark_ms") or 0) for s in states),
                "window": states[0].get("window"),
            }
        elif states and all(_is_stream(s) for s in states):
            offsets = {int(p): int(o) for s in states for p, o in (s.get("offsets") or {}).items()}
            log: dict[str, Any] = next((dict(s["log"]) for s in states if s.get("log")), {})
            for rank in range(world):
                first = rank == 0  # the counts behind the offsets are the job's, counted once
                feeds[rank][name] = {
                    "offsets": offsets,
                    "dead_lettered": sum(int(s.get("dead_lettered", 0)) for s in states) if first else 0,
                    "skipped_records": sum(int(s.get("skipped_records", 0)) for s in states) if first else 0,
                    "log": log,
                }
        else:  # a sampled feed (the replay): its sampler state stays with its rank
            for rank in range(min(world, len(ranks))):
                state = (ranks[rank].get("feeds") or {}).get(name)
                if state is not None:
                    feeds[rank][name] = state
    out: list[dict[str, Any]] = []
    for rank in range(world):
        old = ranks[rank] if rank < len(ranks) else {}
        mine = {k: old.get(k) for k in ("scores", "freshness", "metrics", "clock")}
        out.append({**mine, "mixer": None, "feeds": feeds[rank]})
    return out
