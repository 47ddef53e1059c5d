"""The job's trainers as one data-parallel group: started together, restarted together, regrouped
at a checkpoint.

Data-parallel trainers are one ``torch.distributed`` process group: none can go on without the
others, and a checkpoint is one cut across all of them. So they are managed as a whole, each start
of the group a new **generation** (persisted with the status): its trainers meet through the data
service under that generation (the leader publishes where its rendezvous store listens; the job's
status shows it), and a trainer of an older generation cannot join a newer group.

* A trainer that fails takes the group down: the others are stopped and the whole group starts again
  from the newest checkpoint (the failed trainer's failover budget is the group's).
* A change of the trainer count (``primus scale --role trainer``, the control API, the custom
  resource's ``spec.desired.scale.trainer``) asks every trainer to stop at its next checkpoint (one
  agreed step, then exit ``EXIT_REGROUP``); when none is left the next group starts with the new count
  and resumes there, the checkpoint's data progress re-cut for it (``training/checkpoints/regroup.py``).
* Once a trainer has finished the pass the group only finishes: nothing is launched or regrouped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_provider_primus.contracts.status import EventType, ExecutorState
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.master.executors import (
    COMPLETED,
    REMOVED,
    REMOVING,
    RUNNING,
    Executor,
    Executors,
    Exit,
)
from airflow_provider_primus.resources.backend import Allotment, Observation
from airflow_provider_primus.training.options import EXIT_REGROUP

__all__ = ["TrainerGroup"]

RESEND_S = 5.0  # a regroup request is repeated until the trainers act on it (a master restarted)


class TrainerGroup:
    def __init__(
        self,
        executors: Executors,
        events: EventLog,
        replicas: dict[str, int],
        *,
        applied: dict[str, Any],
        send_command: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """``replicas``: the wanted counts per role (the scaling collaborator's, shared);
        ``applied``: the master's persisted record, where the group's generation is kept."""
        self.executors, self.events, self.replicas = executors, events, replicas
        self.send_command = send_command
        self.state: dict[str, Any] = applied.setdefault("trainer_group", {})
        self.state.setdefault("generation", 0)
        self.state.setdefault("trainers", 0)
        self._restarts: dict[int, int] = {}  # index -> failover count carried into the next group
        self._why = "start"
        self._asked: tuple[int, float] | None = None  # (generation, when) a regroup was last sent

    @property
    def generation(self) -> int:
        return int(self.state["generation"])

    @property
    def size(self) -> int:
        """Trainers in the current group (what their command lines say)."""
        return int(self.state["trainers"]) or self.replicas["trainer"]

    def _trainers(self, *states: ExecutorState) -> list[Executor]:
        return [e for e in self.executors.all.values() if e.role == "trainer" and e.state in states]

    def finished(self) -> bool:
        """Every trainer of the current group completed (ended trainers of older groups aside)."""
        size = self.size
        current = [e for e in self.executors.all.values() if e.role == "trainer" and e.handle.index < size]
        return bool(current) and all(e.state == COMPLETED for e in current)

    # --- an ended trainer ---------------------------------------------------------------------------

    def settle(self, ex: Executor, obs: Observation) -> Exit | None:
        """A trainer ended: stopped for a regroup, or failed in a group of several (the group
        restarts). None: the executors' own rules apply (completed, removed, a lone trainer)."""
        if ex.state == REMOVING:
            return None
        obs = self.executors.observed(ex, obs)
        ended = obs.reason in (None, "exited")
        if ended and obs.exit_code == EXIT_REGROUP:
            ex.exit_code, ex.reason, ex.state = obs.exit_code, obs.reason, REMOVED
            self._restarts[ex.handle.index] = ex.restarts
            self._why = "scale"
            self.events.emit(
                EventType.EXECUTOR_REMOVED, f"{ex.name} stopped at its checkpoint to regroup", ex.name
            )
            return Exit("removed")
        if ended and obs.exit_code == 0:
            return None
        role = self.executors.role("trainer")
        if self.executors.terminal(obs):
            return None  # no restart can help: the executors' rules fail the job with its error
        if self.size <= 1 or ex.restarts >= role.failover.max_restarts or self._trainers(COMPLETED):
            return None  # a lone trainer restarts by itself; an exhausted budget fails the job
        # Whether or not the others still run (a master restarted may find them stopping, or gone):
        # the one that failed is never started alone into a group that is no longer whole.
        others = [e for e in self._trainers(RUNNING) if e is not ex]
        ex.exit_code, ex.reason, ex.state = obs.exit_code, obs.reason, REMOVED
        reason, why = self.executors.why(ex, obs)
        self.events.emit(
            EventType.EXECUTOR_FAILED,
            f"{ex.name} failed ({why}); restarting the trainer group from its checkpoint",
            ex.name,
            {"reason": reason, "error": ex.error},
        )
        self._restarts[ex.handle.index] = ex.restarts + 1
        self._stop_rest(others)
        return Exit("restarted")

    # --- convergence ------------------------------------------------------------------------------

    def converge(self, allotment: Allotment) -> None:
        """Start the next group when no trainer is left; ask the running group to regroup when the
        wanted count differs from its size."""
        if self._trainers(COMPLETED):
            return  # the pass is over: the group finishes as it is
        live = self._trainers(RUNNING, REMOVING)
        want = self.replicas["trainer"]
        if not live:
            if not any(self.executors.still_stopping(f"trainer-{i}") for i in range(want)):
                self._start(want, allotment)
            return
        running = self._trainers(RUNNING)
        missing = self._missing()
        if missing:
            self._restart_incomplete(missing, running)
            return
        if want == self.size or len(running) != len(live):
            return
        now = time.monotonic()
        if self._asked is not None and self._asked[0] == self.generation and now - self._asked[1] < RESEND_S:
            return
        for ex in running:
            self.send_command(ex.service_name, {"type": "regroup", "generation": self.generation})
        self._asked = (self.generation, now)

    def _missing(self) -> list[int]:
        """Indexes of the current group neither live nor stopped to regroup: a launch that failed
        part way through the group's start, or a member that ended while no master watched."""

        def member(ex: Executor | None) -> bool:
            if ex is None:
                return False
            return ex.state in (RUNNING, REMOVING) or (ex.state == REMOVED and ex.exit_code == EXIT_REGROUP)

        return [i for i in range(self.size) if not member(self.executors.all.get(f"trainer-{i}"))]

    def _restart_incomplete(self, missing: list[int], running: list[Executor]) -> None:
        """A group with a member missing cannot take a step (its collectives wait for everyone):
        stop the rest; the next group starts from the checkpoint once they are gone."""
        if not running:
            return  # already stopping
        names = ", ".join(f"trainer-{i}" for i in missing)
        for index in missing:
            gone = self.executors.all.get(f"trainer-{index}")
            self._restarts.setdefault(index, gone.restarts if gone is not None else 0)
        self.events.emit(
            EventType.EXECUTOR_FAILED,
            f"trainer group {self.generation} is missing {names}; restarting the group from its checkpoint",
            f"trainer-{missing[0]}",
            {"reason": f"group incomplete: {names}"},
        )
        self._stop_rest(running)

    def _stop_rest(self, running: list[Executor]) -> None:
        """Stop what is left of a broken group (it could only wait at its next collective); the next
        group starts from the checkpoint, each index keeping its failover count."""
        for ex in running:
            self._restarts[ex.handle.index] = ex.restarts
            self.executors.remove(ex)
        self._why = "failure"

    def _start(self, trainers: int, allotment: Allotment) -> None:
        self.state["generation"] = self.generation + 1
        self.state["trainers"] = trainers
        why = self._why if self.generation > 1 else "start"
        self.events.emit(
            EventType.TRAINERS_REGROUPED,
            f"trainer group {self.generation}: {trainers} trainer(s) ({why})",
            data={"generation": self.generation, "trainers": trainers, "reason": why},
        )
        launched: list[Executor] = []
        try:
            for index in range(trainers):
                self.executors.launch("trainer", index, allotment, restarts=self._restarts.get(index, 0))
                launched.append(self.executors.all[f"trainer-{index}"])
        except Exception:
            # A group started in part would wait for its missing members forever: stop the part
            # (the next pass starts the next group once it is gone) and let the pass fail.
            for ex in launched:
                self.executors.remove(ex)
            raise
        self._restarts.clear()
        self._why = "failure"

    def command_fields(self, index: int) -> dict[str, int]:
        """What a trainer's command line says of its group."""
        return {"trainers": self.size, "rank": index, "generation": self.generation}
