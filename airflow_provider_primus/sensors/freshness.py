"""``StreamFreshnessSensor``: holds downstream work until a streaming trainer has caught up.

Two measures, either or both:

* **consumer lag** (``max_lag_records``): records on the topic that the source's consumer group has
  not committed yet, summed over partitions. The trainer commits a checkpoint's offsets to the group,
  so this is what a restart would re-read — the broker's view, true even while the job is down.
* **event-time lag** (``max_event_lag_s``): now - the job's watermark (the newest event time trained,
  ``status.progress.trainer_metrics.watermark``) — the model's view: how old its newest knowledge is.

Record lag alone misleads on a quiet topic (0 records behind, but hours stale is impossible to tell)
and event lag alone on a bursty one; a publish-the-model step usually wants both. A synchronous poke
is enough (a few short broker round trips): use ``mode="reschedule"`` for long waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.loader import load_data_spec
from airflow_provider_primus.contracts.sources import KafkaSource
from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.data.sources.kafka import KafkaPlanError, consumer_lag
from airflow_provider_primus.hooks.kafka import kafka_client_for
from airflow_provider_primus.hooks.primus import JobRecord, PrimusHook


def watermark_of(record: JobRecord) -> datetime | None:
    """The job's newest trained event time, or None before its trainer reported one."""
    progress = record.status.get("progress") or {}
    value = (progress.get("trainer_metrics") or {}).get("watermark")
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


class StreamFreshnessSensor(BaseSensorOperator):
    """Succeeds when every configured lag is at most its threshold; returns (XCom) the measured values.

    :param job: a running streaming job (templated). Needed for ``max_event_lag_s``; without
        ``spec_path`` its data document is where the Kafka source is looked up.
    :param spec_path: a PrimusData document holding the Kafka source (templated).
    :param source: the Kafka source's name (templated); may be left out when the data has exactly one.
    :param max_lag_records: most uncommitted records allowed across the topic's partitions.
    :param max_event_lag_s: most seconds allowed between now and the job's watermark.
    :param primus_conn_id: the ``primus`` connection (to read the job).
    :param kafka_timeout_s: bound on each broker round trip, so a down broker fails a poke quickly.
    """

    template_fields: Sequence[str] = ("job", "spec_path", "source")
    ui_color = "#f5e6d8"

    def __init__(
        self,
        *,
        job: str | None = None,
        spec_path: str | None = None,
        source: str | None = None,
        max_lag_records: int | None = None,
        max_event_lag_s: float | None = None,
        primus_conn_id: str = PrimusHook.default_conn_name,
        kafka_timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Checked at DAG parse time: a sensor that can never measure anything would only time out.
        if max_lag_records is None and max_event_lag_s is None:
            raise ValueError("give max_lag_records and/or max_event_lag_s: nothing to wait for otherwise")
        if max_lag_records is not None and max_lag_records < 0:
            raise ValueError(f"max_lag_records must be >= 0, got {max_lag_records}")
        if max_event_lag_s is not None and max_event_lag_s <= 0:
            raise ValueError(f"max_event_lag_s must be > 0, got {max_event_lag_s}")
        if max_event_lag_s is not None and not job:
            raise ValueError("max_event_lag_s needs job: the watermark is the job's")
        if max_lag_records is not None and not (spec_path or job):
            raise ValueError("max_lag_records needs spec_path (and source) or job to find the Kafka source")
        self.job = job
        self.spec_path = spec_path
        self.source = source
        self.max_lag_records = max_lag_records
        self.max_event_lag_s = max_event_lag_s
        self.primus_conn_id = primus_conn_id
        self.kafka_timeout_s = kafka_timeout_s

    @cached_property
    def hook(self) -> PrimusHook:
        return PrimusHook(self.primus_conn_id)

    def _record(self, hook: PrimusHook) -> JobRecord:
        assert self.job is not None
        record = hook.get_job(self.job)
        if record is None:
            raise AirflowException(f"no job named {self.job!r}")
        phase = record.status.get("phase")
        if phase in TERMINAL:  # an ended job never catches up: fail now, not at the sensor's timeout
            message = record.status.get("message") or ""
            raise AirflowException(f"job {self.job!r} is {phase}, not running: {message}")
        return record

    def _kafka_source(self, record: JobRecord | None) -> KafkaSource:
        spec_path = self.spec_path
        if not spec_path:
            spec_path = ((record.spec if record else {}).get("spec") or {}).get("data")
            if not spec_path:
                raise AirflowException(f"job {self.job!r} names no data document; pass spec_path")
        try:
            spec = load_data_spec(spec_path).spec
        except SpecError as exc:
            raise AirflowException(f"invalid PrimusData {spec_path}: {exc}") from None
        if self.source:
            try:
                found = spec.source(self.source)
            except KeyError as exc:
                raise AirflowException(str(exc.args[0])) from None
        else:
            streams = [s for s in spec.sources if isinstance(s, KafkaSource)]
            if len(streams) != 1:
                raise AirflowException(
                    f"{spec_path} has {len(streams)} Kafka sources; name the one to measure with source="
                )
            found = streams[0]
        if not isinstance(found, KafkaSource):
            raise AirflowException(f"source {found.name!r} is a {found.type} source, not a Kafka source")
        if not found.group_id:
            raise AirflowException(
                f"source {found.name!r} has no group_id: no committed offsets to measure lag against"
            )
        return found

    def poke(self, context: Any) -> PokeReturnValue:
        record = self._record(self.hook) if self.job else None
        measured: dict[str, Any] = {}
        fresh = True
        if self.max_lag_records is not None:
            source = self._kafka_source(record)
            assert source.group_id is not None  # checked by _kafka_source
            try:
                per_partition = consumer_lag(
                    kafka=kafka_client_for(source),
                    topic=source.topic,
                    group_id=source.group_id,
                    timeout_ms=int(self.kafka_timeout_s * 1000),
                )
            except KafkaPlanError as exc:
                raise AirflowException(str(exc)) from None
            lag = sum(per_partition.values())
            measured["lag_records"] = lag
            fresh = fresh and lag <= self.max_lag_records
            self.log.info(
                "source %s (topic %s, group %s): %d records behind (max %d); per partition %s",
                source.name,
                source.topic,
                source.group_id,
                lag,
                self.max_lag_records,
                per_partition,
            )
        if self.max_event_lag_s is not None:
            assert record is not None  # max_event_lag_s requires job
            watermark = watermark_of(record)
            if watermark is None:
                measured["event_lag_s"] = None
                fresh = False
                self.log.info("job %s: no watermark yet (the trainer has not trained on an event)", self.job)
            else:
                event_lag = (datetime.now(UTC) - watermark).total_seconds()
                measured["event_lag_s"] = round(event_lag, 3)
                fresh = fresh and event_lag <= self.max_event_lag_s
                self.log.info(
                    "job %s: watermark %s, %.1f s behind (max %.1f s)",
                    self.job,
                    watermark.isoformat(),
                    event_lag,
                    self.max_event_lag_s,
                )
        return PokeReturnValue(is_done=fresh, xcom_value=measured)
