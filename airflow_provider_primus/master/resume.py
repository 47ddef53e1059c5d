"""What a master takes over from the status its predecessor wrote, so a restart loses nothing.

The status is the master's memory: the requests it already acted on, the executors it launched
(re-adopted, never launched twice), the data service's acknowledged rows and appended windows, the
open savepoints, the trainer's last report and the ports it served on (clients and executors that kept
an address find the new master there). A first start reads an empty status: a Pending job with nothing
to take over. The stored status is parsed once, here; the collaborators get their parts in the form
they keep.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_primus.contracts.status import JobStatus
from airflow_provider_primus.master.publish import JobEndedError, refuse_second_master

__all__ = ["Resumed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resumed:
    status: JobStatus

    @classmethod
    def take_over(cls, job: str, stored: Mapping[str, Any]) -> Resumed:
        """Refuses a job that has already ended, and one whose previous master still runs (one
        writer per status).

        A part of the stored status that does not fit this version's contract (written by another
        version, or edited by hand) is left behind with a warning naming it, never the reason a
        master cannot start: the rest is still the job's memory, and this master rewrites the whole
        status at its first pass."""
        status, dropped = JobStatus.salvage(stored)
        if dropped:
            log.warning(
                "job %s: the stored status's %s did not fit the status contract and are not taken over",
                job,
                ", ".join(dropped),
            )
        if status.phase.terminal:
            raise JobEndedError(job, status.phase.value)
        refuse_second_master(job, status.master)
        return cls(status)

    @property
    def restarted(self) -> bool:
        """A master ran before: its executors, ports and progress are this one's to continue."""
        return self.status.master is not None

    @property
    def dispatcher_port(self) -> int:
        """The data service's port before (0 on a first start: any free one)."""
        return self.status.master.dispatcher_port if self.status.master else 0

    @property
    def api_port(self) -> int:
        """The control API's port before (0 on a first start: the spec's)."""
        return self.status.master.api_port if self.status.master else 0

    def executors(self) -> dict[str, dict[str, Any]]:
        """The executors it launched, defaults filled in for fields an older master did not write."""
        return {n: e.model_dump(mode="json") for n, e in self.status.executors.items()}

    def savepoints(self) -> dict[str, dict[str, Any]]:
        return {k: v.model_dump(mode="json", exclude_unset=True) for k, v in self.status.savepoints.items()}

    def windows(self) -> list[dict[str, Any]]:
        """The windows appended before, as written (their views are derived again at each status)."""
        return [w.model_dump(mode="json", exclude_unset=True) for w in self.status.windows]
