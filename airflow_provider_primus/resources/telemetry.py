"""Telemetry: one sample per executor per master pass, the autoscaler's only input.

A sample joins what the backend observes of the process (CPU seconds, RSS, I/O bytes) with what the
executor reports about its work (rows, and where its time went). Counters are cumulative so any two
samples of the same executor give rates, and a lost sample loses nothing.

``wait_s`` and ``busy_s`` mean, per role:

* trainer: waiting for data (the starvation signal) vs computing;
* data executor: blocked on credit (the trainer is slower) vs blocked on storage (reading, decoding,
  transforming).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    t: float  # seconds, monotonic within one master
    executor: str
    role: str
    cpu: float  # allotted cores at t
    memory: int  # memory limit at t, bytes
    cpu_s: float  # cumulative CPU seconds of the executor
    rss: int  # resident memory now, bytes
    read_bytes: int = 0
    write_bytes: int = 0
    rows: int = 0  # cumulative rows served (data) or trained (trainer)
    wait_s: float = 0.0
    busy_s: float = 0.0
    # False: neither the backend nor the executor could say how much CPU and memory it used (a pod
    # before its first heartbeat). Unknown is never read as idle: the autoscaler leaves it alone.
    usage_known: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sample:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})
