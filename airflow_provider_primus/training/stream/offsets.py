"""Where a stream starts and resumes: the start policy, the log a checkpoint's offsets index, and the
source's ``offset_reset`` policy when a position cannot be resumed.

Never a silent jump: a position that is gone (retention deleted it, the topic or the broker's data was
recreated) either stops the trainer (``fail``) or moves it to the partition's earliest or latest
offset with every record skipped counted and reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.data.sources.kafka import resolve_offsets
from airflow_provider_primus.data.sources.kafka_client import consumer
from airflow_provider_primus.errors import TerminalError
from airflow_provider_primus.training.stream.reconnect import RECONNECT_BACKOFF_MAX_MS, REQUEST_TIMEOUT_MS

__all__ = [
    "OffsetReset",
    "StreamOffsetLost",
    "lost_reason",
    "new_consumer",
    "offset_reset",
    "planned_start",
    "replacement",
    "topic_log_identity",
    "with_dropped",
]


class StreamOffsetLost(TerminalError):
    """A position to resume from is not in the partition any more and the source's
    ``offset_reset`` policy is ``fail``. Terminal: a restarted trainer resumes at the same lost
    position, so only a change of the policy (or of the checkpoint) can go on."""


def new_consumer(source: KafkaSource, max_poll_records: int) -> Any:
    return consumer(
        source,
        group_id=source.group_id,
        enable_auto_commit=False,
        # Never jump silently: an offset that no longer exists is handled by offset_reset.
        auto_offset_reset="none",
        max_poll_records=max_poll_records,
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
        client_id=f"primus-stream-{source.name}",
    )


def planned_start(source: KafkaSource) -> dict[int, int]:
    """Per partition, where the source's start policy begins (no checkpoint to resume from)."""
    planned = resolve_offsets(
        kafka=source,
        topic=source.topic,
        start_policy=source.start.policy,
        start_timestamp=source.start.timestamp,
        group_id=source.group_id,
        window_start=None,
        window_end=None,
    )
    return {p: s for p, s, _ in planned}


def topic_log_identity(consumer: Any, topic: str) -> dict[str, Any]:
    """Which log the topic name stands for now, from the consumer's metadata (cluster and topic id)."""
    cluster = consumer._client.cluster
    topic_id = cluster.topic_id(topic)
    return {"cluster_id": cluster.cluster_id, "topic_id": str(topic_id) if topic_id else None}


def replacement(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """Why the log now behind the topic name is not the one ``before`` described, or None."""
    for key, what in (("cluster_id", "cluster"), ("topic_id", "topic")):
        if before.get(key) and now.get(key) and before[key] != now[key]:
            return f"the {what} was recreated ({key} {before[key]} -> {now[key]})"
    return None


def lost_reason(position: int, lo: int) -> str:
    """Why ``position`` is outside a partition whose first offset is ``lo``."""
    return "records before it were deleted" if position < lo else "the log is shorter than that"


@dataclass(frozen=True)
class OffsetReset:
    """Where a partition goes on, how many records that skips, and the job event that reports it."""

    target: int
    skipped: int
    message: str
    data: dict[str, Any]


def offset_reset(
    source: KafkaSource, partition: int, position: int, *, lo: int, hi: int, why: str, same_log: bool
) -> OffsetReset:
    """Where to go on when ``position`` cannot be resumed, per the source's ``offset_reset``;
    raises ``StreamOffsetLost`` under ``fail``."""
    where = f"{source.topic}/{partition}"
    policy = source.offset_reset
    if policy == "fail":
        raise StreamOffsetLost(
            f"stream {source.name}: cannot resume {where} at offset {position}: {why} "
            f"(the partition now holds offsets {lo}..{hi}). Nothing was skipped. To go on, set "
            f"offset_reset: earliest or latest on source {source.name!r}; the records "
            "skipped are then counted in the job's events and status"
        )
    target = lo if policy == "earliest" else hi
    # Same log: records deleted before ``lo`` were never trained, nor are those jumped over. A new
    # log: its records before the target are skipped (the old log's rest is gone with it).
    skipped = max(0, lo - position) + max(0, target - max(position, lo)) if same_log else target - lo
    return _described(
        where,
        policy,
        {
            "partition": partition,
            "offset": position,
            "resumed_at": target,
            "skipped": skipped,
            "reason": why,
            "log_replaced": not same_log,
            "end_offset": hi,
        },
        first=lo,
    )


def with_dropped(reset: OffsetReset, dropped: int) -> OffsetReset:
    """The reset with the rows of the replaced log that were read but not yet trained (dropped when
    its seek takes effect) counted in, so that its event and ``skipped_records`` are one figure."""
    if not dropped:
        return reset
    data = {**reset.data, "skipped": reset.skipped + dropped, "dropped_buffered": dropped}
    where = reset.message.split(":", 1)[0]
    return _described(where, str(reset.data["policy"]), data, first=int(reset.data["first_offset"]))


def _described(where: str, policy: str, data: dict[str, Any], *, first: int) -> OffsetReset:
    skipped, dropped = int(data["skipped"]), int(data.get("dropped_buffered", 0))
    buffered = f", {dropped} of them read from the old log and not yet trained" if dropped else ""
    message = (
        f"{where}: offset {data['offset']} cannot be resumed ({data['reason']}; the partition holds "
        f"{first}..{data['end_offset']}); offset_reset={policy}: resumed at {data['resumed_at']}, "
        f"{skipped} record(s) skipped{buffered}"
    )
    return OffsetReset(
        target=int(data["resumed_at"]),
        skipped=skipped,
        message=message,
        data={**data, "policy": policy, "first_offset": first},
    )
