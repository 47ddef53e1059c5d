"""Savepoints the master asks a job's trainer for, and their acknowledgement (and its request to
stop at a checkpoint so that the trainers regroup).

A savepoint is answered by the next durable checkpoint, which covers every savepoint waiting when it
is written: one checkpoint for a burst, however many ids arrived. Acknowledgements are reported
cumulatively, grouped by the checkpoint that covered them, so an answer the master missed is carried
again by the next report; the newest ``SAVEPOINTS_REPORTED`` ids are kept, enough for any burst the
master has outstanding at once. Without a reporter (not a job's trainer) there is nothing to do.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_provider_primus.training.reporter import JobReporter

__all__ = ["SAVEPOINTS_REPORTED", "Savepoints"]

SAVEPOINTS_REPORTED = 1000  # savepoint ids a trainer's report acknowledges (the newest ones)


class Savepoints:
    def __init__(self, reporter: JobReporter | None) -> None:
        self.reporter = reporter
        # Ids not yet covered by a checkpoint, and the recent ones that are, grouped by checkpoint.
        self.waiting: dict[str, None] = {}
        self.done: list[dict[str, Any]] = []
        # The master regroups the trainers (another count): stop at the next checkpoint.
        self.regroup = False

    def take(self) -> None:
        """Savepoint ids from the master join the waiting set; one already covered is answered by
        the cumulative report again (the master re-sends what it has not seen acknowledged)."""
        if self.reporter is None:
            return
        covered = {i for group in self.done for i in group["ids"]}
        while not self.reporter.commands.empty():
            command = self.reporter.commands.get_nowait()
            if command.get("type") == "regroup":
                self.regroup = True
            elif command.get("type") == "savepoint" and command.get("id") is not None:
                sp = str(command["id"])
                if sp not in covered:
                    self.waiting[sp] = None

    def covered(self, checkpoint: str, step: int) -> None:
        """Checkpoint ``checkpoint`` (at ``step``) is durable: the report names it, and it covers
        every waiting savepoint."""
        if self.reporter is None:
            return
        # ``time``: the job's checkpoint age (the master's metrics) is measured from it.
        self.reporter.extra["checkpoint"] = {"step": step, "id": checkpoint, "time": round(time.time(), 3)}
        if not self.waiting:
            return
        self.done.append({"checkpoint": checkpoint, "step": step, "ids": list(self.waiting)})
        self.waiting = {}
        excess = sum(len(g["ids"]) for g in self.done) - SAVEPOINTS_REPORTED
        while excess > 0:
            oldest = self.done[0]
            if len(oldest["ids"]) <= excess:
                excess -= len(oldest["ids"])
                del self.done[0]
            else:
                self.done[0] = {**oldest, "ids": oldest["ids"][excess:]}
                excess = 0
        # A new list each time: the reporter thread may be serialising the previous one.
        self.reporter.extra["savepoints_done"] = list(self.done)
