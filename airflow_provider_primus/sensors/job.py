"""``PrimusJobSensor``: waits for a Primus job, submitted elsewhere, to reach a phase.

For a job started by another DAG or by hand (``primus jobs submit``): the operator that submits a job
waits for it itself. Waiting for an end (``Succeeded``) defers to ``PrimusJobTrigger`` — the same
trigger the operators use — with ``stop_on_kill=False``: this sensor does not own the job, so killing
the sensor must not stop it. Waiting for a phase a job passes through (``Running``) polls instead: the
trigger only reports ends. Poking and the trigger's event are judged alike (``outcome.phase_result``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException

from airflow_provider_primus.contracts.status import TERMINAL, Phase
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.operators.outcome import PrimusJobFailed, phase_result, progress_line
from airflow_provider_primus.triggers.job import PrimusJobTrigger

# The phases of docs/contracts.md (PrimusJob status); a misspelt phase would never match.
PHASES = tuple(p.value for p in Phase)


def _phases(name: str, phases: Iterable[str]) -> tuple[str, ...]:
    found = tuple(phases)
    if isinstance(phases, str):  # ("Succeeded") without the comma: a string, not a tuple
        found = (phases,)
    unknown = [p for p in found if p not in PHASES]
    if unknown:
        raise ValueError(f"{name}: unknown phase(s) {unknown}; phases are {', '.join(PHASES)}")
    return found


class PrimusJobSensor(BaseSensorOperator):
    """Succeeds when the job's phase is one of ``target_phases``; fails, with the job's message, when it
    is one of ``failure_phases`` or ends in any other phase. Returns (XCom) ``{job, phase, message,
    tasks_quarantined}``; a job that succeeded with quarantined tasks (rows left out of training) is
    also logged as a warning naming their files and errors.

    :param job: the job's name (templated).
    :param target_phases: phases that end the wait successfully.
    :param failure_phases: phases that fail the task.
    :param primus_conn_id: the ``primus`` connection.
    :param deferrable: wait in the triggerer (only when every target phase is final; default:
        Airflow's ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("job",)
    ui_color = "#d8e8f5"

    def __init__(
        self,
        *,
        job: str,
        target_phases: Sequence[str] = ("Succeeded",),
        failure_phases: Sequence[str] = ("Failed", "Stopped"),
        primus_conn_id: str = PrimusHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target_phases = _phases("target_phases", target_phases)
        self.failure_phases = _phases("failure_phases", failure_phases)
        if not self.target_phases:
            raise ValueError("target_phases must name at least one phase")
        both = set(self.target_phases) & set(self.failure_phases)
        if both:
            raise ValueError(f"phases {sorted(both)} are in both target_phases and failure_phases")
        self.job = job
        self.primus_conn_id = primus_conn_id
        self.deferrable = deferrable

    @cached_property
    def hook(self) -> PrimusHook:
        return PrimusHook(self.primus_conn_id)

    def _outcome(
        self, phase: str | None, message: str, progress: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The XCom value once the wait is over, None while it goes on; raises for a failure."""
        try:
            return phase_result(
                self.job,
                phase,
                message,
                progress,
                target_phases=self.target_phases,
                failure_phases=self.failure_phases,
                log=self.log,
            )
        except PrimusJobFailed as exc:
            raise AirflowException(str(exc)) from None

    def poke(self, context: Any) -> PokeReturnValue:
        record = self.hook.get_job(self.job)
        if record is None:
            raise AirflowException(f"no job named {self.job!r}")
        status = record.status
        outcome = self._outcome(status.get("phase"), str(status.get("message") or ""), status.get("progress"))
        if outcome is None:
            self.log.info("job %s: %s", self.job, progress_line(status))
        return PokeReturnValue(is_done=outcome is not None, xcom_value=outcome)

    def execute(self, context: Any) -> Any:
        # The trigger reports only a job's end, so it can stand in for polling only when every target
        # is a final phase; a target like "Running" is polled.
        if not self.deferrable or not all(p in TERMINAL for p in self.target_phases):
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=PrimusJobTrigger(
                self.job,
                primus_conn_id=self.primus_conn_id,
                wait_for="end",
                poll_interval=float(self.poke_interval),
                stop_on_kill=False,
            ),
            method_name="execute_complete",
            timeout=float(self.timeout) if self.timeout is not None else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        phase = event.get("phase")
        message = str(event.get("message") or "")
        if phase is None:  # the trigger could not read the job (e.g. it was deleted)
            raise AirflowException(f"job {self.job!r}: {message or 'wait failed'}")
        outcome = self._outcome(phase, message, event.get("progress"))
        if outcome is None:  # cannot happen with wait_for="end": the trigger yields final phases only
            raise AirflowException(f"job {self.job!r}: trigger ended in non-final phase {phase}")
        return outcome
