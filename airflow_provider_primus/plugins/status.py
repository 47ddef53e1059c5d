"""What the pages read of a stored job status: the typed status, salvaged where a part does not fit
the contract, and the labels that tie jobs together on a page."""

from __future__ import annotations

import logging
import threading

from airflow_provider_primus.contracts.status import JobStatus
from airflow_provider_primus.lookup import as_map, num
from airflow_provider_primus.master.store import JobRecord

__all__ = ["BASELINE_LABEL", "as_map", "num", "read_status"]

log = logging.getLogger(__name__)

# A job carrying this label (its value: another job's name) is that job's baseline: the other job's
# page compares their stream AUCs (a batch-only shadow beside a mixed model, say).
BASELINE_LABEL = "primus.dev/baseline-for"

# What was reported already: a page refreshes every few seconds and the sampler polls, so the same
# misfit would otherwise fill the web server's log. Bounded: forgotten (and said again) when full.
_reported: set[tuple[str, float, tuple[str, ...]]] = set()
_reported_lock = threading.Lock()
_REPORTED_MAX = 1000


def read_status(record: JobRecord) -> JobStatus:
    """The record's status as the typed model, less the parts that do not fit it (a status from
    another version of the master, one written by hand): a page shows the rest rather than fail.
    What was left out is logged by its place in the status, never its value."""
    status, dropped = JobStatus.salvage(record.status)
    if dropped:
        key = (record.name, record.created, dropped)
        with _reported_lock:
            new = key not in _reported
            if new:
                if len(_reported) >= _REPORTED_MAX:
                    _reported.clear()
                _reported.add(key)
        if new:
            log.warning(
                "job %s: parts of its stored status do not fit this version's status contract and are "
                "not shown: %s",
                record.name,
                ", ".join(dropped),
            )
    return status
