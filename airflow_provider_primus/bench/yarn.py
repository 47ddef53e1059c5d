"""``primus bench yarn``: the YARN backend against the local one, on Hadoop's mini cluster.

The same job (the autoscale benchmark's click logs, scaling off) runs twice in this process: once on
the local backend, once with ``backend.type: yarn``, its executors in containers of its application.
Measured:

* ``allocation_to_serving_s`` (p50, p95) — per data executor, from the moment YARN allocated its
  container (the ApplicationMaster's record) until the executor registered with the job's
  dispatcher, ready to serve: localization, the container's start and the executor's own start-up;
* ``resize_applied_s`` (median, max) — in-place memory updates (256 -> 512 -> 256 MiB) from the
  ApplicationMaster's request to the NodeManager applying them, the container id unchanged;
* ``rows_per_s`` on each backend from the first data executor serving to the last row acknowledged
  (the trainer's start is inside both), and their ratio
  ``yarn_vs_local`` (the target is >= 0.8: the data path is the same, only where executors run differs).

A cluster is started in ``workdir`` unless ``conf_dir`` names a running one (``primus yarn up``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from airflow_provider_primus.bench.autoscale import documents, finish, write_logs
from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import SqliteJobStore
from airflow_provider_primus.resources.backend import Allotment

__all__ = ["BenchmarkError", "run"]


def _job(root: Path, name: str, executors: int, yarn: dict[str, Any] | None) -> Path:
    path = documents(root, files=executors * 2, scaling=False, window_s=10.0, cooldown_s=10.0, data_cpu=1.0)
    job = yaml.safe_load(path.read_text())
    job["metadata"]["name"] = name
    job["spec"]["roles"]["data"]["replicas"] = {"min": executors, "initial": executors, "max": executors}
    job["spec"]["roles"]["data"]["resources"] = {"cpu": 1.0, "memory": "256Mi"}
    job["spec"]["roles"]["trainer"]["resources"] = {"cpu": 1.0, "memory": "1Gi"}
    if yarn is not None:
        job["spec"]["backend"] = {"type": "yarn", "yarn": yarn}
    out = root / f"{name}.yaml"
    out.write_text(yaml.safe_dump(job))
    return out


def _run_job(root: Path, name: str, rows: int, executors: int, yarn: dict[str, Any] | None) -> dict[str, Any]:
    from airflow_provider_primus.yarn.backend import YarnBackend
    from airflow_provider_primus.yarn.submission import backend_factory

    home = root / f"home-{name}"
    store = SqliteJobStore(home / "jobs.sqlite")
    submit(_job(root, name, executors, yarn), store=store, home=home)
    acked: list[tuple[float, int]] = []
    registered: dict[str, float] = {}
    resizes: list[float] = []
    done = threading.Event()

    def on_status(status: dict[str, Any]) -> None:
        acked.append((time.time(), int(status["progress"]["acked_rows"])))

    factory = backend_factory() if yarn is not None else None
    master = Master(name, store, home=home, tick_s=0.2, on_status=on_status, backend_factory=factory)

    def watch() -> None:  # when each data executor registers with the dispatcher (ready to serve)
        while not done.is_set():
            for executor in list(master.dispatcher.executors):
                registered.setdefault(executor, time.time())
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    thread = threading.Thread(target=master.run, daemon=True)
    thread.start()
    allocation: list[float] = []
    if isinstance(master.backend, YarnBackend):
        backend = master.backend
        deadline = time.monotonic() + 300
        while len(registered) < executors and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.05)
        slots = {s["key"]: s for s in backend.containers()}
        for key, t in registered.items():
            slot = slots.get(key)
            if slot and slot.get("allocated_at"):
                allocation.append(t - slot["allocated_at"] / 1000)
        handle = master.executors.all["data-0"].handle
        for target in (Allotment(1.0, 512 * 2**20), Allotment(1.0, 256 * 2**20)):
            handle = backend.resize(handle, target)
            slot = next(s for s in backend.containers() if s["key"] == handle.ref["key"])
            resize = slot["resize"]
            if resize["state"] != "applied":
                raise BenchmarkError(f"resize of {handle.name} not applied: {resize}")
            resizes.append((resize["applied_at"] - resize["asked_at"]) / 1000)
        master.executors.all["data-0"].handle = handle
    try:
        finish(master, thread, store, name, rows)
    finally:
        done.set()
    # From the first data executor serving to the last row acknowledged, on either backend.
    t0 = min(registered.values())
    t1 = next(t for t, a in acked if a >= rows)
    return {"rows_per_s": rows / max(1e-6, t1 - t0), "allocation": allocation, "resizes": resizes}


def run(
    *,
    rows: int = 60_000,
    executors: int = 4,
    conf_dir: Path | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    from airflow_provider_primus.embedded.yarn import start

    root = Path(tempfile.mkdtemp(prefix="primus-bench-yarn-", dir=workdir))
    cluster = None
    try:
        if conf_dir is None:
            cluster = start(root / "cluster", node_managers=1, nm_memory_mb=6144, nm_vcores=8)
            conf_dir = cluster.conf_dir
        written = write_logs(root / "logs", rows=rows, files=executors * 2, distinct=2)
        local = _run_job(root, "bench-local", written, executors, None)
        on_yarn = _run_job(
            root, "bench-yarn", written, executors, {"conf_dir": str(conf_dir), "am_memory": "256Mi"}
        )
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    allocation = on_yarn["allocation"]
    if not allocation:
        raise BenchmarkError("no data executor's allocation-to-serving time was measured")
    return {
        "bench": "yarn",
        "rows": written,
        "data_executors": executors,
        "allocation_to_serving_s": {
            "p50": round(float(np.quantile(allocation, 0.5)), 3),
            "p95": round(float(np.quantile(allocation, 0.95)), 3),
            "n": len(allocation),
        },
        "resize_applied_s": {
            "median": round(statistics.median(on_yarn["resizes"]), 3),
            "max": round(max(on_yarn["resizes"]), 3),
            "n": len(on_yarn["resizes"]),
        },
        "rows_per_s": {"local": round(local["rows_per_s"], 1), "yarn": round(on_yarn["rows_per_s"], 1)},
        "yarn_vs_local": round(on_yarn["rows_per_s"] / local["rows_per_s"], 3),
        "machine": "shared",
    }
