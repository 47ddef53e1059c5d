"""The executor's side of a resize: notice the new allotment and size thread pools to it.

The backend changes cores and limits from outside, but thread pools sized at start-up would keep
oversubscribing a shrunk executor (or idle on a grown one), so the backend also rewrites the file
named by ``PRIMUS_ALLOTMENT_FILE`` and the executor follows it: the trainer polls between steps,
the data executor runs ``start_thread``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_primus.resources.backend import Allotment

log = logging.getLogger(__name__)

ENV_VAR = "PRIMUS_ALLOTMENT_FILE"
# Native thread pools that size themselves from the machine's cores at start-up.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_env(allotment: Allotment) -> dict[str, str]:
    """The environment that sizes OpenMP, MKL and OpenBLAS to an executor's whole cores at its start
    (``apply_threads`` sizes pyarrow's and torch's own pools later): without it a process spawns a
    thread per core of the node, however few it was given, and oversubscribes it."""
    return dict.fromkeys(THREAD_VARS, str(max(1, math.ceil(allotment.cpu))))


# OpenMP's worker threads (GNU libgomp, which PyPI's torch uses) spin for a while after every
# parallel region before they sleep. A trainer that waits for its next rows between small steps (a
# live stream) then burns its extra cores spinning: measured here, 2 threads at 5 rows a step and
# 20 steps a second used 0.30 of a core spinning against 0.06 passive, the same steps done. Spinning
# looks like work to the autoscaler (a raised trainer never looks idle enough to be lowered) and is
# taken from the node's other tenants. So trainers run their pools passive unless the environment
# says otherwise (``OMP_WAIT_POLICY=ACTIVE`` for a dedicated node training large batches).
IDLE_THREADS_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def passive_idle_threads() -> None:
    """Set ``IDLE_THREADS_ENV`` where the environment does not: before the OpenMP runtime loads
    (torch's import), since it reads its settings once, then."""
    for key, value in IDLE_THREADS_ENV.items():
        os.environ.setdefault(key, value)


_Key = tuple[int, int, int]


class AllotmentWatcher:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        raw = path if path is not None else os.environ.get(ENV_VAR)
        self.path = Path(raw) if raw else None
        self._key: _Key | None = None
        self._data: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refresh()
        self._polled: dict[str, Any] | None = (
            self._data
        )  # the first poll reports only changes made after start-up

    def _refresh(self) -> None:
        """Re-read the file only when it looks different: the inode changes on every atomic replace,
        so a rewrite within one timestamp tick and of the same size is still noticed."""
        if self.path is None:
            return
        try:
            st = self.path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if key != self._key:
                self._data = json.loads(self.path.read_text())
                self._key = key
        except (OSError, ValueError):
            pass  # not written yet, or replaced between stat and read: the next call sees it

    def current(self) -> Allotment | None:
        with self._lock:
            self._refresh()
            return Allotment.from_dict(self._data) if self._data is not None else None

    @property
    def cores(self) -> list[int]:
        with self._lock:
            return [int(c) for c in (self._data or {}).get("cores", [])]

    def poll(self) -> Allotment | None:
        """The new allotment if it changed since the last poll, else None."""
        with self._lock:
            self._refresh()
            if self._data is None or self._data == self._polled:
                return None
            self._polled = self._data
            return Allotment.from_dict(self._data)

    @staticmethod
    def apply_threads(allotment: Allotment) -> None:
        import pyarrow

        n = max(1, math.ceil(allotment.cpu))
        pyarrow.set_cpu_count(n)
        torch = sys.modules.get("torch")  # never import torch just for this: it costs seconds
        if torch is not None:
            torch.set_num_threads(n)

    def start_thread(
        self, interval_s: float = 0.5, on_change: Callable[[Allotment], None] | None = None
    ) -> threading.Thread:
        def run() -> None:
            while not self._stop.wait(interval_s):
                allotment = self.poll()
                if allotment is None:
                    continue
                try:
                    self.apply_threads(allotment)
                    if on_change is not None:
                        on_change(allotment)
                except Exception:  # a bad callback must not stop the executor following its allotment
                    log.exception("applying allotment %s failed", allotment)

        thread = threading.Thread(target=run, name="primus-allotment", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
