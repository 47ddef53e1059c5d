"""``primus bench k8s``: one master reconciling a job from 10 to 1,000 executor pods and back.

Against the real control plane of ``embedded/kube`` (kube-apiserver with etcd, kube-scheduler, and
kwok simulating ``nodes`` nodes and the pods' lifecycles). The master is the production one with
the Kubernetes store and backend; it runs in this process so its pass times can be read directly.

Measured, side by side in one run:

* ``time_to_1000_running_s`` — from the scale request (a PATCH of the PrimusJob's ``scale``
  subresource, what ``kubectl scale`` does) until the master reports 1,000 data executors and every
  one of their pods is Running (scheduled by kube-scheduler, started by kwok);
* ``pass_s_at_1000`` — the median (and max) duration of the master's reconcile passes while 1,000
  executors run and nothing changes;
* ``requests_per_idle_pass`` at 10 and at 1,000 executors — apiserver requests of the master per
  idle pass (its reads are served by watches; an unchanged status is not rewritten until its
  heartbeat), which must not grow with the executor count;
* ``time_to_10_s`` — scaling back in, until only 10 data pods remain.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_primus.bench.autoscale import documents, write_logs
from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.contracts.crd import API_VERSION, CRD_NAME, PLURAL, crd
from airflow_provider_primus.embedded.kube.binaries import ensure_binaries
from airflow_provider_primus.embedded.kube.cluster import KubeCluster
from airflow_provider_primus.kubernetes.client import KubeApi, resource_path
from airflow_provider_primus.kubernetes.install import apply, wait_established
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.kubernetes.submission import kube_master
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.master import Master

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

NAMESPACE = "bench"
JOB = "bench-k8s"


def _job_document(root: Path, low: int, high: int) -> Path:
    write_logs(root / "logs", rows=2_000, files=2, distinct=1)
    path = documents(root, 2, scaling=False, window_s=10.0, cooldown_s=10.0)
    job = yaml.safe_load(path.read_text())
    job["metadata"]["name"] = JOB
    job["spec"]["backend"] = {"type": "kubernetes", "kubernetes": {"namespace": NAMESPACE}}
    job["spec"]["roles"]["data"] = {
        "replicas": {"min": 1, "initial": low, "max": high},
        "resources": {"cpu": "100m", "memory": "64Mi"},
    }
    job["spec"]["roles"]["trainer"] = {"resources": {"cpu": 1, "memory": "1Gi"}}
    job["spec"]["data_service"] = {"master_grace_s": 600.0}
    path.write_text(yaml.safe_dump(job))
    return path


def _wait(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise BenchmarkError(f"{what}: not reached within {timeout_s:.0f}s")
        time.sleep(0.05)
    return time.monotonic() - started


def _running_data(master: Master) -> int:
    return len(master.executors.running("data"))


def _pods_running(master: Master, want: int) -> bool:
    backend: Any = master.backend
    pods = [p for p in backend.pods() if p["metadata"]["labels"].get("primus.dev/role") == "data"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(live) == want and all((p.get("status") or {}).get("phase") == "Running" for p in live)


def _idle(master: Master, api: KubeApi, passes: int) -> tuple[list[float], float, float]:
    """Pass durations, requests per pass and requests per second over ``passes`` idle passes."""
    start = len(master.pass_times)
    before, t0 = api.requests, time.monotonic()
    _wait("idle passes", lambda: len(master.pass_times) >= start + passes, 300)
    requests, elapsed = api.requests - before, time.monotonic() - t0
    times = list(master.pass_times)[start : start + passes]
    return times, requests / passes, requests / elapsed


def run(
    *,
    nodes: int = 50,
    low: int = 10,
    high: int = 1000,
    idle_passes: int = 40,
    settle_s: float = 12.0,
    workdir: Path | None = None,
) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="primus-bench-k8s-", dir=workdir))
    binaries = ensure_binaries()
    cluster = KubeCluster(binaries, root / "cluster")
    log.info("starting the control plane")
    state = cluster.start()
    master: Master | None = None
    thread: threading.Thread | None = None
    try:
        cluster.add_nodes(nodes, cpu="64", memory="512Gi", pods=110)
        cluster.create_namespace(NAMESPACE)
        admin = KubeApi(cluster.api_client())
        apply(admin, crd())
        wait_established(admin, CRD_NAME, 60)
        home = root / "home"
        submit(_job_document(root, low, high), store=KubeJobStore(admin, NAMESPACE), home=home)
        api = KubeApi(cluster.api_client())
        master = kube_master(JOB, api, NAMESPACE, home=home, tick_s=0.5)
        thread = threading.Thread(target=master.run, name="master", daemon=True)
        thread.start()
        m = master
        _wait(f"{low} data pods running", lambda: _running_data(m) == low and _pods_running(m, low), 300)
        time.sleep(settle_s)  # past one status heartbeat: the idle figures are steady-state
        low_times, low_requests, low_rate = _idle(master, api, idle_passes)

        scale = resource_path(API_VERSION, PLURAL, NAMESPACE, JOB) + "/scale"
        log.info("scaling to %d data pods", high)
        admin.patch(scale, {"spec": {"replicas": high}})
        up = _wait(
            f"{high} data pods running", lambda: _running_data(m) == high and _pods_running(m, high), 900
        )
        time.sleep(settle_s)
        high_times, high_requests, high_rate = _idle(master, api, idle_passes)

        log.info("scaling back to %d data pods", low)
        admin.patch(scale, {"spec": {"replicas": low}})
        down = _wait(
            f"back to {low} data pods", lambda: _running_data(m) == low and _pods_running(m, low), 600
        )
        return {
            "pass_s_at_1000": round(statistics.median(high_times), 4),
            "pass_s_at_1000_max": round(max(high_times), 4),
            "pass_s_at_10": round(statistics.median(low_times), 4),
            "time_to_1000_running_s": round(up, 2),
            "time_to_10_s": round(down, 2),
            "requests_per_idle_pass": round(high_requests, 3),
            "requests_per_idle_pass_at_10": round(low_requests, 3),
            # The only request of an idle master is the status heartbeat (every 10 s): per second
            # it is the same at any size; per pass it follows the pass length.
            "requests_per_idle_s": round(high_rate, 3),
            "requests_per_idle_s_at_10": round(low_rate, 3),
            "executors": high,
            "nodes": nodes,
            "control_plane_startup_s": round(state.startup_seconds, 2),
            "kubernetes": state.version,
        }
    finally:
        if master is not None:
            master.request({"stop": True})
        if thread is not None:
            thread.join(timeout=120)
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
