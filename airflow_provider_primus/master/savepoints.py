"""Savepoints: every request is answered by a checkpoint taken after it, or failed when none can be.

A request is recorded when it reaches the master; it is sent to every running trainer incarnation
and again every ``RESEND_S`` until a checkpoint covers it (commands ride on report answers, which can
be lost, and die with the trainer or master that held them). Trainers report, cumulatively, which
savepoint ids each of their checkpoints covered, so one checkpoint may satisfy many requests and a
report the master missed costs nothing. When the job ends every open request is settled.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import Executor

__all__ = ["Savepoints"]

# An open savepoint is sent to a trainer again after this long: the report answer that carried it
# may have been lost. The trainer ignores one it has already covered (and acknowledges it again).
RESEND_S = 10.0


class Savepoints:
    def __init__(self, events: EventLog, previous: Mapping[str, Mapping[str, Any]]) -> None:
        self.events = events
        self.state: dict[str, dict[str, Any]] = {k: dict(v) for k, v in previous.items()}
        # (trainer service name, savepoint id) -> when it was last sent; not persisted, so a
        # restarted master sends every open savepoint again (its predecessor's queue died with it).
        self._sent: dict[tuple[str, str], float] = {}

    def record(self, requested: Iterable[str]) -> None:
        for sp in requested:
            if sp not in self.state:
                self.state[sp] = {"state": "requested"}
                self.events.emit(EventType.SAVEPOINT_REQUESTED, f"savepoint {sp} requested")

    def open(self) -> list[str]:
        return [sp for sp, s in self.state.items() if s.get("state") == "requested"]

    def send(self, trainers: list[Executor], send_command: Any) -> None:
        """Every open savepoint to every running trainer incarnation, again every RESEND_S until
        acknowledged. ``send_command(service_name, command)`` is the data service's."""
        open_ = self.open()
        keep = {ex.service_name for ex in trainers}
        self._sent = {k: t for k, t in self._sent.items() if k[0] in keep and k[1] in open_}
        now = time.monotonic()
        for ex in trainers:
            for sp in open_:
                sent = self._sent.get((ex.service_name, sp))
                if sent is None or now - sent >= RESEND_S:
                    send_command(ex.service_name, {"type": "savepoint", "id": sp})
                    self._sent[(ex.service_name, sp)] = now

    def reported(self, metrics: Mapping[str, Any]) -> None:
        """A trainer's report: the savepoints its checkpoints covered (one group per checkpoint)."""
        for group in metrics.get("savepoints_done") or []:
            covered = [sp for sp in group["ids"] if self.state.get(sp, {}).get("state") == "requested"]
            if covered:
                self._done(covered, int(group["step"]), str(group["checkpoint"]))

    def _done(self, ids: list[str], step: int, checkpoint: str) -> None:
        for sp in ids:
            self.state[sp] = {"state": "done", "step": step, "checkpoint": checkpoint}
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        self.events.emit(
            EventType.SAVEPOINT_DONE,
            f"savepoint{'s' if len(ids) > 1 else ''} {shown} at step {step} ({checkpoint})",
            data={"ids": ids, "step": step, "checkpoint": checkpoint},
        )

    def settle(self, phase: str, trainer_report: Mapping[str, Any]) -> None:
        """An ended job answers every open savepoint, so nothing waits on one forever. A trainer
        that finished took its final checkpoint after its last step: that checkpoint holds the state
        any later savepoint asks for. Otherwise no checkpoint will ever cover them."""
        open_ = self.open()
        self._sent.clear()
        if not open_:
            return
        final = trainer_report.get("checkpoint") if trainer_report.get("final") else None
        if phase == "Succeeded" and final:
            self._done(open_, int(final["step"]), str(final["id"]))
            return
        reason = f"the job ended ({phase}) before a checkpoint covered it"
        for sp in open_:
            self.state[sp] = {"state": "failed", "reason": reason}
        self.events.emit(
            EventType.SAVEPOINT_FAILED, f"{len(open_)} savepoint(s): {reason}", data={"ids": open_}
        )
