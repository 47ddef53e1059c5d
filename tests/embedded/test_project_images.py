"""The project's own images, built by buildah from ``docker/Dockerfile`` (``embedded/kube/project_image.py``),
run Primus code in pods on the real node.

The data image (master and data executors; no torch) runs ``primus validate`` and ``primus plan`` on
a PrimusData document mounted from a ConfigMap, over Parquet files mounted from the host, and proves
that torch is not in it; the trainer image imports torch and the trainer's model and takes one
optimisation step. Both are imported into the node's containerd from their cached OCI archives, as
``primus cluster`` users would (``ctr -n k8s.io images import``); pods use ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.contracts.crd import CRD_NAME, PLURAL, crd
from airflow_provider_primus.embedded.kube.local import LocalCluster
from airflow_provider_primus.embedded.kube.project_image import DATA, TRAINER, ProjectImage
from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, resource_path
from airflow_provider_primus.kubernetes.conversion_manifests import NAME as WEBHOOK
from airflow_provider_primus.kubernetes.install import apply, install_conversion_webhook, wait_established
from tests.data.conftest import T0, files_source, hour_dir, spec_doc, write
from tests.embedded.conftest import import_image
from tests.embedded.test_real_node import await_value

# A cold build installs torch into the trainer image (minutes on 2 cores); scripts/test.sh builds the
# images before the suite, so there this is only the import into the node's containerd.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def api(real_cluster: LocalCluster) -> Iterator[KubeApi]:
    with real_cluster.cluster_state.api_client() as client:
        yield KubeApi(client)


@pytest.fixture(scope="module")
def namespace(api: KubeApi) -> str:
    name = f"images-{uuid.uuid4().hex[:8]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": name}})

    def service_account() -> bool | None:  # made by kube-controller-manager; admission needs it
        try:
            api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return True
        except KubeError:
            return None

    await_value("the namespace's default ServiceAccount", service_account, timeout_s=30)
    return name


def _run_pod(api: KubeApi, namespace: str, name: str, spec: dict[str, Any], timeout_s: float) -> tuple[
    dict[str, Any], str, float]:  # fmt: skip
    """Create a pod that runs to completion; return it, its log and the seconds it took."""
    created = time.monotonic()
    api.create(f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": name}, "spec": spec})
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"

    def finished() -> dict[str, Any] | None:
        pod = api.get(path)
        return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    pod = await_value(f"pod {name} finished", finished, timeout_s=timeout_s)
    took = time.monotonic() - created
    return pod, api.get_text(f"{path}/log"), took


def _exit_code(pod: dict[str, Any]) -> int:
    state = pod["status"]["containerStatuses"][0]["state"]
    return int(state["terminated"]["exitCode"])


def test_the_data_image_runs_primus_on_a_mounted_document_without_torch(
    project_images: dict[str, ProjectImage],  # first: a cold build happens before the node starts
    real_cluster: LocalCluster,
    api: KubeApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    image = project_images[DATA]
    import_s = import_image(real_cluster, image)
    # Parquet history on the host, mounted read-only where the document says it is.
    store = tmp_path / "store"
    for h in range(2):
        write(hour_dir(store, T0 + timedelta(hours=h)) / "a.parquet", "parquet", 10)
    for entry in [tmp_path, *tmp_path.rglob("*")]:  # the image runs as uid 10001
        entry.chmod(0o755 if entry.is_dir() else 0o644)
    document = yaml.safe_dump(spec_doc([files_source("s", Path("/data/store"))]))
    api.create(f"/api/v1/namespaces/{namespace}/configmaps",
               {"metadata": {"name": "documents"}, "data": {"data.yaml": document}})  # fmt: skip
    end = (T0 + timedelta(hours=2)).isoformat()
    script = (
        "set -e; primus validate /docs/data.yaml; "
        f"primus plan /docs/data.yaml --start {T0.isoformat()} --end {end} --cache /tmp/plan.sqlite; "
        "python -c 'import importlib.util, sys; "
        "import airflow_provider_primus.master.master, airflow_provider_primus.data.service.executor; "
        'print("torch:", importlib.util.find_spec("torch")); '
        'print("loaded:", sorted(m for m in sys.modules if m.startswith("torch")))\''
    )
    spec = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "primus",
                "image": image.name,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", script],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "volumeMounts": [
                    {"name": "documents", "mountPath": "/docs", "readOnly": True},
                    {"name": "store", "mountPath": "/data/store", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "documents", "configMap": {"name": "documents"}},
            {"name": "store", "hostPath": {"path": str(store), "type": "Directory"}},
        ],
    }
    pod, log, took = _run_pod(api, namespace, "data-image", spec, timeout_s=180)
    print(f"\ndata image {image.name} ({image.size}, archive {image.archive_bytes / 1e6:.0f} MB): "
          f"import {import_s:.1f}s, pod done {took:.1f}s after creation")  # fmt: skip
    assert pod["status"]["phase"] == "Succeeded", log
    assert _exit_code(pod) == 0
    lines = log.splitlines()
    assert "ok: PrimusData 'test': 1 source" in lines
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    assert (summary["partitions"], summary["tasks"], summary["rows"], summary["missing"]) == (2, 2, 20, [])
    assert "torch: None" in lines and "loaded: []" in lines


def test_the_trainer_image_has_torch_and_trains_a_step(
    project_images: dict[str, ProjectImage], real_cluster: LocalCluster, api: KubeApi, namespace: str
) -> None:
    image = project_images[TRAINER]
    import_s = import_image(real_cluster, image)
    code = (
        "import json, torch\n"
        "import airflow_provider_primus.training.dlrm\n"
        "torch.manual_seed(0)\n"
        "w = torch.zeros(4, requires_grad=True)\n"
        "x, y = torch.randn(64, 4), torch.randn(64)\n"
        "opt = torch.optim.SGD([w], lr=0.1)\n"
        "before = float(((x @ w - y) ** 2).mean())\n"
        "loss = ((x @ w - y) ** 2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n"
        "after = float(((x @ w - y) ** 2).mean())\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(),"
        " 'before': before, 'after': after}))\n"
    )
    spec = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": image.name,
                "imagePullPolicy": "Never",
                "command": ["python", "-c", code],
                "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
            }
        ],
    }
    pod, log, took = _run_pod(api, namespace, "trainer-image", spec, timeout_s=300)
    print(f"\ntrainer image {image.name} ({image.size}, archive {image.archive_bytes / 1e6:.0f} MB): "
          f"import {import_s:.1f}s, pod done {took:.1f}s after creation")  # fmt: skip
    assert pod["status"]["phase"] == "Succeeded", log
    assert _exit_code(pod) == 0
    result = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert result["torch"].startswith("2.")
    assert result["cuda"] is False  # the CUDA build, on a node without a GPU
    assert result["after"] < result["before"]


def test_the_conversion_webhook_runs_in_pods_and_the_crd_serves_both_versions(
    project_images: dict[str, ProjectImage], real_cluster: LocalCluster, api: KubeApi, namespace: str
) -> None:
    """``primus k8s install --conversion-webhook`` as a cluster runs it: the webhook's Deployment
    from the data image on the node, the CRD calling its Service with the CA of its Secret. A job
    written at v1alpha1 is stored at v1beta1 and reads back at either version through the pods."""
    import_image(real_cluster, project_images[DATA])
    try:
        conversion = install_conversion_webhook(api, namespace, project_images[DATA].name)
        apply(api, crd(conversion))
        wait_established(api, CRD_NAME, 60)
        deployment = resource_path("apps/v1", "deployments", namespace, WEBHOOK)

        def ready() -> int | None:
            status = api.get(deployment).get("status", {})
            count = status.get("readyReplicas")
            return count if count and count == status.get("replicas") else None

        await_value("the webhook's pods ready", ready, timeout_s=180)
        spec = {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}}
        job = {"apiVersion": "primus.dev/v1alpha1", "kind": "PrimusJob", "metadata": {"name": "old"}}
        job["spec"] = spec

        def created() -> bool | None:  # the Service's endpoints are published just after readiness
            try:
                api.create(resource_path("primus.dev/v1alpha1", PLURAL, namespace), job)
                return True
            except KubeError as exc:
                if "conversion webhook" not in str(exc):
                    raise
                return None

        await_value("a v1alpha1 job accepted through the webhook", created, timeout_s=60)
        new = api.get(resource_path("primus.dev/v1beta1", PLURAL, namespace, "old"))
        assert new["apiVersion"] == "primus.dev/v1beta1" and new["spec"] == spec
        job = {**job, "apiVersion": "primus.dev/v1beta1", "metadata": {"name": "new"}}
        api.create(resource_path("primus.dev/v1beta1", PLURAL, namespace), job)
        listed = api.get(resource_path("primus.dev/v1alpha1", PLURAL, namespace))["items"]
        assert {i["metadata"]["name"]: i["apiVersion"] for i in listed} == {
            "old": "primus.dev/v1alpha1",
            "new": "primus.dev/v1alpha1",
        }
        assert all(i["spec"] == spec for i in listed)
    finally:
        apply(api, crd())  # as the other modules on this node expect it: no webhook to call
        wait_established(api, CRD_NAME, 60)
