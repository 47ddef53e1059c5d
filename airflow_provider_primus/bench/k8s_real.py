"""``primus bench k8s --real``: the same job on the local backend and in pods on a real node.

The job (``bench/autoscale.py``'s click-log world and documents, batch training) runs twice: first
with the local backend (executors are processes in cgroups), then on the embedded single-node cluster
(``embedded/kube/local.py``: kubelet, containerd, runc) from the project's images, its logs mounted
into the master and data executor pods from a PersistentVolume at the same path. Both runs take the
same actions at the same point — once the first data executor runs, its CPU is raised in place and a
second data executor is asked for — so their throughput compares like with like.

Measured:

* ``rows_per_s_local`` / ``rows_per_s_pods`` — rows acknowledged per second from the first to the
  last acknowledgement (the dispatcher's count, as the autoscaling benchmark reads it);
  ``pods_ratio`` = pods / local;
* ``pod_ready_p50_s`` / ``pod_ready_p95_s`` — from a pod's creation to its Ready condition, seen by a
  poller every 50 ms, over every pod of the pods run (the master's too);
* ``scale_out_to_serving_s`` — from the scale request to the new data executor's pod being Ready
  (its readiness probe is its Flight port: it serves);
* ``resize_applied_s`` — from the resize request to the new CPU quota in the container's own cgroup,
  read on the host.

Image builds and imports and the cluster's start are not timed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_primus.bench.autoscale import FILES_PER_HOUR, documents, write_logs
from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.contracts.crd import CRD_NAME, crd
from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.embedded.kube.local import LocalCluster
from airflow_provider_primus.embedded.kube.project_image import DATA, TRAINER, ensure_project_images
from airflow_provider_primus.kubernetes.client import KubeApi, resource_path
from airflow_provider_primus.kubernetes.install import apply, wait_established
from airflow_provider_primus.kubernetes.manifests import rbac
from airflow_provider_primus.kubernetes.store import KubeJobStore
from airflow_provider_primus.kubernetes.submission import read_ca_cert, start_master_pod
from airflow_provider_primus.kubernetes.submission import read_token as read_secret_token
from airflow_provider_primus.master.client import ControlClient
from airflow_provider_primus.master.jobs import read_job_ca, read_token, submit
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobStore, SqliteJobStore

JOB = "bench-real"
NAMESPACE = "bench-real"
POD_USER = 10001
DATA_CPU, RESIZED_CPU, TRAINER_CPU = 0.25, 0.4, 0.75


def _documents(root: Path, rows: int, files: int) -> dict[str, Any]:
    write_logs(root / "logs", rows=rows, files=files, distinct=min(files, 2))
    job = yaml.safe_load(documents(root, files, scaling=False, window_s=10.0, cooldown_s=10.0,
                                   data_cpu=DATA_CPU).read_text())  # fmt: skip
    job["metadata"]["name"] = JOB
    roles = job["spec"]["roles"]
    roles["data"]["resources"]["bounds"]["cpu"] = {"min": DATA_CPU, "max": 0.5}
    # The autoscale benchmark's 256 MiB is a squeeze for its scaler to relieve; here nothing scales
    # memory, and a data executor reading 250,000-row files at that limit was killed by the kernel
    # (cgroup limits are enforced on both sides), so both sides get what a pod of this size needs.
    roles["data"]["resources"]["memory"] = "768Mi"
    roles["data"]["resources"]["bounds"]["memory"] = {"max": "1Gi"}
    roles["trainer"]["resources"] = {"cpu": TRAINER_CPU, "memory": "2Gi"}
    job["spec"]["data_service"]["master_grace_s"] = 120.0
    return dict(job)


class _Progress:
    """(time, acked rows, phase) of every status the job's store shows, from a thread."""

    def __init__(self, store: JobStore, name: str) -> None:
        self.store, self.name = store, name
        self.samples: list[tuple[float, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        version = -1
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a store hiccup: the next version will come
                record = self.store.get(self.name)
                if record.version != version:
                    version = record.version
                    status = record.status
                    acked = int((status.get("progress") or {}).get("acked_rows") or 0)
                    self.samples.append((time.monotonic(), acked, str(status.get("phase") or "")))
                self.store.watch(self.name, version, 0.5)

    def wait(self, what: str, done: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.store.get(self.name).status
            if done(status):
                return status
            if status.get("phase") in TERMINAL:
                raise BenchmarkError(
                    f"{self.name}: {status.get('phase')} before {what}: {status.get('message')}"
                )
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{self.name}: {what} not reached within {timeout_s:.0f}s")
            time.sleep(0.05)

    def rows_per_s(self, rows: int) -> float:
        t0 = next(t for t, acked, _ in self.samples if acked > 0)
        t1 = next(t for t, acked, _ in self.samples if acked >= rows)
        return rows / max(t1 - t0, 1e-6)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _data_running(status: dict[str, Any]) -> bool:
    ex = (status.get("executors") or {}).get("data-0") or {}
    return status.get("phase") == "Running" and ex.get("state") == "running"


def _drive(
    progress: _Progress,
    client: Callable[[], ControlClient],
    rows: int,
    *,
    resized: Callable[[float], float | None] = lambda _t: None,
    serving: Callable[[float], float | None] = lambda _t: None,
    settled: Callable[[], object] = lambda: None,
    timeout_s: float,
) -> dict[str, Any]:
    """The job's run: once data-0 runs, raise its CPU and ask for a second data executor, then
    wait for the end. ``resized``/``serving``: how long, from the given request time, until the
    resize is applied / the new executor serves (None: not measured here); ``settled``: waits until
    data-0 really serves (a pod: Ready), so that the clocks time the changes alone."""
    progress.wait("data-0 running", _data_running, timeout_s)
    settled()
    control = client()
    asked = time.monotonic()
    control.resize("data-0", cpu=RESIZED_CPU)
    resize_s = resized(asked)
    asked = time.monotonic()
    control.scale("data", 2)
    scale_s = serving(asked)
    status = progress.wait("the end", lambda s: s.get("phase") in TERMINAL, timeout_s)
    if status["phase"] != "Succeeded":
        raise BenchmarkError(f"{progress.name}: {status['phase']}: {status.get('message')}")
    acked = int(status["progress"]["acked_rows"])
    if acked != rows:
        raise BenchmarkError(f"{progress.name}: {acked} rows acknowledged, {rows} planned")
    progress.stop()
    return {"rows_per_s": progress.rows_per_s(rows), "resize_s": resize_s, "scale_s": scale_s}


def _local(root: Path, job: dict[str, Any], rows: int, timeout_s: float) -> float:
    home = root / "home-local"
    path = root / "job-local.yaml"
    path.write_text(yaml.safe_dump(job))
    store = SqliteJobStore(home / "jobs.sqlite")
    submit(path, store=store, home=home)
    master = Master(JOB, store, home=home, tick_s=0.25)
    thread = threading.Thread(target=master.run, daemon=True)
    thread.start()
    progress = _Progress(store, JOB)
    try:
        api = lambda: ControlClient(  # noqa: E731
            store.get(JOB).status["master"]["api"], read_token(JOB, home), ca=read_job_ca(JOB, home)
        )
        result = _drive(progress, api, rows, timeout_s=timeout_s)
    finally:
        progress.stop()
        if thread.is_alive():
            master.request({"stop": True})
        thread.join(timeout=60)
    return float(result["rows_per_s"])


class _PodClock:
    """First-seen and Ready times of the namespace's pods, polled every 50 ms."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api, self.path = api, resource_path("v1", "pods", namespace)
        self.created: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                now = time.monotonic()
                for pod in self.api.get(self.path).get("items", []):
                    uid = pod["metadata"]["uid"]
                    self.pods[uid] = pod
                    self.created.setdefault(uid, now)
                    conditions = (pod.get("status") or {}).get("conditions") or []
                    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                        self.ready.setdefault(uid, now)
            self._stop.wait(0.05)

    def ready_s(self) -> list[float]:
        return sorted(self.ready[u] - self.created[u] for u in self.ready)

    def ready_named(self, name: str, since: float, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for uid, pod in list(self.pods.items()):
                if pod["metadata"]["name"] == name and uid in self.ready:
                    return self.ready[uid] - since
            time.sleep(0.05)
        raise BenchmarkError(f"pod {name} not Ready within {timeout_s:.0f}s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def cpu_quota_file(pod: dict[str, Any], cgroup_version: int) -> Path:
    """The container's CPU quota file on the host, as the kubelet (cgroupfs driver) lays groups out:
    ``kubepods[/<qos>]/pod<uid>/<container id>``."""
    uid = pod["metadata"]["uid"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[-1]
    root = Path("/sys/fs/cgroup") if cgroup_version == 2 else Path("/sys/fs/cgroup/cpu")
    name = "cpu.max" if cgroup_version == 2 else "cpu.cfs_quota_us"
    groups: list[Path] = [root / "kubepods" / f"pod{uid}" / cid, *root.glob(f"kubepods/*/pod{uid}/{cid}")]
    for group in groups:
        if (group / name).exists():
            return group / name
    raise BenchmarkError(f"no cgroup for container {cid} of pod {pod['metadata']['name']}")


def _quota_cores(path: Path, cgroup_version: int) -> float | None:
    text = path.read_text().split()
    if cgroup_version == 2:
        return None if text[0] == "max" else int(text[0]) / int(text[1])
    quota = int(text[0])
    period = int((path.parent / "cpu.cfs_period_us").read_text())
    return None if quota < 0 else quota / period


def _await_quota(path: Path, cgroup_version: int, cores: float, since: float, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = _quota_cores(path, cgroup_version)
        if value is not None and abs(value - cores) < 1e-3:
            return time.monotonic() - since
        time.sleep(0.02)  # the kernel's file: nothing to block on
    raise BenchmarkError(f"{path}: quota not {cores} cores within {timeout_s:.0f}s")


def _prepare_namespace(api: KubeApi, logs: Path) -> None:
    apply(api, crd())
    wait_established(api, CRD_NAME, 60)
    api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for doc in rbac(NAMESPACE):
        apply(api, doc)
    pv = f"{NAMESPACE}-logs"
    api.create("/api/v1/persistentvolumes", {
        "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                 "storageClassName": "bench", "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(logs), "type": "Directory"}},
    })  # fmt: skip
    api.create(resource_path("v1", "persistentvolumeclaims", NAMESPACE), {
        "metadata": {"name": "logs"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "bench", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    claim = resource_path("v1", "persistentvolumeclaims", NAMESPACE, "logs")
    deadline = time.monotonic() + 60
    while api.get(claim).get("status", {}).get("phase") != "Bound":
        if time.monotonic() > deadline:
            raise BenchmarkError("the logs' claim was not bound within 60s")
        time.sleep(0.1)


def _pods(root: Path, job: dict[str, Any], rows: int, timeout_s: float) -> dict[str, Any]:
    images = ensure_project_images()  # built (minutes, once per source change) before the clock
    cluster = LocalCluster(root / "cluster")
    cluster.start()
    try:
        assert cluster.node is not None and cluster.state is not None
        for image in images.values():
            cluster.node.containerd.ctr("images", "import", str(image.archive), timeout_s=1800)
        with cluster.cluster_state.api_client() as client:
            api = KubeApi(client)
            logs = root / "logs"
            _prepare_namespace(api, logs)
            mount = [{"volume": "logs", "path": str(logs), "read_only": True}]  # where the documents say
            job["spec"]["control"] = {"host": "0.0.0.0"}
            claim = {"claim_name": "logs", "read_only": True}
            job["spec"]["backend"] = {"type": "kubernetes", "kubernetes": {
                "namespace": NAMESPACE, "image": images[DATA].name,
                "images": {"trainer": images[TRAINER].name}, "image_pull_policy": "Never",
                "volumes": [{"name": "logs", "persistent_volume_claim": claim}],
                "mounts": {"master": mount, "data": mount},
            }}  # fmt: skip
            path = root / "job-pods.yaml"
            path.write_text(yaml.safe_dump(job))
            store = KubeJobStore(api, NAMESPACE)
            clock = _PodClock(api, NAMESPACE)
            progress = _Progress(store, JOB)
            try:
                submit(path, store=store, home=root / "home-pods")
                start_master_pod(store, JOB)
                token = read_secret_token(api, NAMESPACE, JOB)
                ca = read_ca_cert(api, NAMESPACE, JOB)  # TLS is on by default on Kubernetes
                version = cluster.state.cgroup_version

                data0 = f"{JOB}-data-0-0"

                def resized(asked: float) -> float:
                    pod = api.get(resource_path("v1", "pods", NAMESPACE, data0))
                    quota = cpu_quota_file(pod, version)
                    return _await_quota(quota, version, RESIZED_CPU, asked, 60)

                result = _drive(
                    progress,
                    lambda: ControlClient(store.get(JOB).status["master"]["api"], token, ca=ca),
                    rows,
                    resized=resized,
                    serving=lambda asked: clock.ready_named(f"{JOB}-data-1-0", asked, 120),
                    settled=lambda: clock.ready_named(data0, time.monotonic(), timeout_s),
                    timeout_s=timeout_s,
                )
            finally:
                progress.stop()
                clock.stop()
            ready = clock.ready_s()
            return {**result, "ready": ready}
    finally:
        cluster.stop()


def _percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


@contextlib.contextmanager
def _root(workdir: Path | None) -> Iterator[Path]:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir
        return
    path = Path(tempfile.mkdtemp(prefix="primus-bench-real-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run(*, hours: int = 4, rows_per_hour: int = 100_000, workdir: Path | None = None,
        timeout_s: float = 1800.0) -> dict[str, Any]:  # fmt: skip
    files = hours * FILES_PER_HOUR
    rows = (rows_per_hour * hours // files) * files
    with _root(workdir) as root:
        root.chmod(0o755)  # the pods' user reads the logs through the volume
        job = _documents(root, rows, files)
        for entry in (root / "logs").rglob("*"):
            os.chmod(entry, 0o755 if entry.is_dir() else 0o644)
        local = _local(root, job, rows, timeout_s)
        pods = _pods(root, job, rows, timeout_s)
    ready = pods["ready"]
    return {
        "rows_per_s_local": round(local, 1),
        "rows_per_s_pods": round(pods["rows_per_s"], 1),
        "pods_ratio": round(pods["rows_per_s"] / local, 3),
        "pod_ready_p50_s": round(_percentile(ready, 0.5), 2),
        "pod_ready_p95_s": round(_percentile(ready, 0.95), 2),
        "scale_out_to_serving_s": round(pods["scale_s"], 2),
        "resize_applied_s": round(pods["resize_s"], 2),
        "rows": rows,
        "pods": len(ready),
    }
