"""``DataPartitionSensor``: holds a DAG run until a files source's partitions for its interval exist.

By default it waits for the run's data interval, so a daily DAG that trains on yesterday starts when
yesterday's last hour has landed, not at a guessed clock time. Deferrable by default: one quick check
on the worker, then the wait moves to the triggerer (``DataPartitionTrigger``) and frees the worker
slot. With ``deferrable=False`` it is an ordinary sensor whose ``poke`` suits ``mode="reschedule"``.
Both paths use the same readiness check (``airflow_provider_primus.data.readiness``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException

from airflow_provider_primus.data.readiness import ReadinessError, check_source, parse_time
from airflow_provider_primus.triggers.partitions import DataPartitionTrigger

# ``data_interval_start`` is None on a run without a data interval: render "" (a clear error in
# ``execute``) instead of letting Jinja fail on ``None.isoformat()``.
DEFAULT_START = "{{ data_interval_start.isoformat() if data_interval_start else '' }}"
DEFAULT_END = "{{ data_interval_end.isoformat() if data_interval_end else '' }}"


class DataPartitionSensor(BaseSensorOperator):
    """Succeeds when every partition of ``source`` (a files source of the PrimusData at ``spec_path``)
    in [start, end) is ready; returns (XCom) the ready partition folders.

    :param spec_path: the PrimusData document (templated). In deferrable mode the triggerer reads it
        too, so it must be at the same path there.
    :param source: the files source's name (templated).
    :param start: ISO 8601 start of the range (templated; default: the run's data interval start).
    :param end: ISO 8601 end, exclusive (templated; default: the run's data interval end).
    :param deferrable: wait in the triggerer instead of occupying a worker slot (default: Airflow's
        ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("spec_path", "source", "start", "end")
    ui_color = "#e8f0d8"

    def __init__(
        self,
        *,
        spec_path: str,
        source: str,
        start: str | datetime = DEFAULT_START,
        end: str | datetime = DEFAULT_END,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.source = source
        self.start = start
        self.end = end
        self.deferrable = deferrable

    def _range(self) -> tuple[str, str]:
        """Start and end as ISO strings (the trigger's serializable form), checked here so a bad
        template fails the task at once instead of in the triggerer."""
        try:
            return parse_time(self.start, "start").isoformat(), parse_time(self.end, "end").isoformat()
        except ReadinessError as exc:
            raise AirflowException(str(exc)) from None

    def poke(self, context: Any) -> PokeReturnValue:
        start, end = self._range()
        try:
            found = check_source(self.spec_path, self.source, start, end)
        except ReadinessError as exc:  # waiting cannot fix it: fail instead of poking until the timeout
            raise AirflowException(str(exc)) from None
        if found.complete:
            self.log.info(
                "source %s: all %d partitions in [%s, %s) ready", self.source, len(found.ready), start, end
            )
        else:
            self.log.info("source %s: %s", self.source, found.describe_missing())
        return PokeReturnValue(is_done=found.complete, xcom_value=list(found.ready))

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)  # already there: no round trip through the triggerer
        if first.is_done:
            return first.xcom_value
        start, end = self._range()
        timeout_s = float(self.timeout) if self.timeout is not None else None
        self.defer(
            trigger=DataPartitionTrigger(
                spec_path=self.spec_path,
                source=self.source,
                start=start,
                end=end,
                poll_interval=float(self.poke_interval),
                timeout_s=timeout_s,
            ),
            method_name="execute_complete",
            # The trigger times out first and names what is missing; this only backs it up.
            timeout=timedelta(seconds=timeout_s + max(60.0, 2 * float(self.poke_interval)))
            if timeout_s is not None
            else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> list[str]:
        if event.get("status") == "success":
            partitions: list[str] = list(event.get("partitions") or [])
            self.log.info("source %s: %d partitions ready", self.source, len(partitions))
            return partitions
        message = str(event.get("message") or "partition wait failed")
        missing = list(event.get("missing") or [])
        if missing:
            message = f"{message}\nmissing partitions: {', '.join(missing)}"
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        raise AirflowException(message)
