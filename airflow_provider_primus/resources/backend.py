"""The executor contract every backend implements: launch, resize in place, terminate, observe.

The master speaks only this interface, so the local backend (OS processes) and the Kubernetes
backend (pods) are interchangeable. Handles are plain data: the master stores them in the job's
status, and a restarted master re-adopts running executors from those records (``adopt``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from airflow_provider_primus.errors import TerminalError

# A backend that cannot run a job at all (its cluster's configuration asks for something the backend
# does not speak), or can no longer (the YARN application holding the job's containers has ended),
# raises a ``TerminalError``: the master fails the job at once with the message, where a transient
# error (a cluster briefly unreachable) is retried. The name stays for backends and callers that use it.
BackendUnusableError = TerminalError


@dataclass(frozen=True)
class Allotment:
    """What an executor may use: cores (fractional allowed) and a memory limit in bytes."""

    cpu: float
    memory: int

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "memory": self.memory}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Allotment:
        return cls(float(d["cpu"]), int(d["memory"]))


@dataclass
class Handle:
    """A launched executor. ``ref`` is backend-specific identity (local: pid and start time, so a
    recycled pid is never mistaken for our process; Kubernetes: pod name and uid)."""

    name: str
    role: str
    index: int
    allotment: Allotment
    ref: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["allotment"] = self.allotment.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Handle:
        return cls(
            name=str(d["name"]),
            role=str(d["role"]),
            index=int(d["index"]),
            allotment=Allotment.from_dict(d["allotment"]),
            ref=dict(d.get("ref") or {}),
        )


@dataclass(frozen=True)
class Observation:
    """What the backend sees of one executor at one instant (cumulative counters, so any two
    observations give rates). Once the executor has ended, ``exit_code`` is its code (None when the
    backend cannot know it: an adopted process) and ``reason`` says how: ``exited`` on its own,
    ``terminated`` by the backend on request, or ``memory limit: …`` by the memory watchdog."""

    name: str
    t: float
    alive: bool
    cpu_s: float = 0.0
    rss: int = 0  # the highest resident memory since the previous observation (watchdog samples too)
    read_bytes: int = 0
    write_bytes: int = 0
    exit_code: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LaunchRequest:
    """One executor to start: who it is (its name, role and index; ``incarnation`` counts the
    launches of that name, so a backend can tell a restart from the executor it replaces), what it
    may use, and what it runs with which environment."""

    name: str
    role: str
    index: int
    allotment: Allotment
    command: Sequence[str]
    env: Mapping[str, str]
    incarnation: int = 0


class Backend(Protocol):
    # Whether the master may launch several executors at once (a launch is a network round trip,
    # a pod create) or must launch one by one (local processes share this machine's start-up cost).
    parallel_launch: bool

    def launch(self, request: LaunchRequest) -> Handle: ...

    def resize(self, handle: Handle, allotment: Allotment) -> Handle:
        """Change the allotment of the running executor in place (same process or pod)."""
        ...

    def terminate(self, handle: Handle, grace_s: float = 10.0) -> None: ...

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]: ...

    def adopt(self, handle: Handle) -> bool:
        """Take over an executor a previous master launched; False when it is no longer running."""
        ...

    def close(self) -> None:
        """Stop background work (watchdogs, throttles) without touching the executors."""
        ...
