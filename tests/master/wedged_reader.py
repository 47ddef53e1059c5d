"""A real data executor (``primus serve-data``) whose reader wedges before its third lease: its
heartbeat goes on, so the heartbeat rule sees it alive, but it asks for no more work while work
waits. What a reader thread stuck in a read that never returns looks like to the master.

Run as ``python wedged_reader.py serve-data ...`` (the data executor's own arguments)."""

from __future__ import annotations

import sys
import threading
from typing import Any

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.data.service.dispatcher_server import DispatcherClient

LEASES_BEFORE_WEDGE = 2


def wedge_after(granted: int) -> None:
    """Let ``granted`` leases that hand out a task through, then block every further lease call for
    the rest of the process's life (it ends when the master kills it)."""
    real_lease = DispatcherClient.lease
    leased = 0
    never = threading.Event()

    def lease(self: DispatcherClient, executor: str) -> dict[str, Any]:
        nonlocal leased
        if leased >= granted:
            never.wait()
        resp = real_lease(self, executor)
        if "task" in resp:
            leased += 1
        return resp

    DispatcherClient.lease = lease  # type: ignore[method-assign]


if __name__ == "__main__":
    wedge_after(LEASES_BEFORE_WEDGE)
    sys.exit(main(sys.argv[1:]))
