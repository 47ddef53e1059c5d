"""The Kubernetes commands as a user runs them: `primus crd`, `primus k8s install/manifests`, and the
job commands with ``--namespace`` against the real control plane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.contracts.crd import crd
from airflow_provider_primus.kubernetes.manifests import MASTER_ACCOUNT
from tests.cli.test_jobs_cli import primus
from tests.kube_env import KubeEnv
from tests.master.conftest import JobWorld

pytestmark = pytest.mark.timeout(240)


def test_crd_prints_the_generated_definition() -> None:
    assert yaml.safe_load(primus("crd").stdout) == crd()


def test_manifests_print_rbac_and_the_master_pod() -> None:
    docs = list(
        yaml.safe_load_all(
            primus("k8s", "manifests", "-n", "ml", "--master", "j", "--document", "/d.yaml").stdout
        )
    )
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert ("ServiceAccount", MASTER_ACCOUNT) in kinds and ("ClusterRole", "primus-crd-reader") in kinds
    pod = docs[-1]
    assert pod["kind"] == "Pod" and pod["spec"]["serviceAccountName"] == MASTER_ACCOUNT
    assert pod["spec"]["containers"][0]["command"] == ["primus", "master", "j", "--namespace", "ml"]
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/d.yaml"


def test_install_is_idempotent(kube: KubeEnv) -> None:
    config = str(kube.kubeconfig())
    for _ in range(2):
        out = primus("k8s", "install", "--kubeconfig", config, "--rbac", "-n", kube.namespace).stdout
        assert "customresourcedefinition/primusjobs.primus.dev established" in out
        assert f"role/{MASTER_ACCOUNT} applied" in out


def test_job_commands_on_a_namespace(kube: KubeEnv, job_world: JobWorld) -> None:
    config = ["--kubeconfig", str(kube.kubeconfig())]
    cluster = ["-n", kube.namespace, *config]
    roles = {"data": {"replicas": {"min": 1, "max": 3}}, "trainer": {"resources": {"memory": "1Gi"}}}
    backend = {"type": "kubernetes", "kubernetes": {"namespace": kube.namespace}}
    job = job_world.job(backend=backend, follow=True, roles=roles)
    store = str(job_world.root / "local.sqlite")
    local = primus("submit", str(job), "--store", store, check=False)  # not for the local store
    assert local.returncode == 2 and "spec.backend.type" in local.stderr
    elsewhere = primus("submit", str(job), "-n", "default", *config, check=False)
    assert elsewhere.returncode == 2 and "spec.backend.kubernetes.namespace" in elsewhere.stderr
    # The document's own namespace chooses the cluster store: no -n needed.
    assert primus("submit", str(job), "--label", "team=ads", *config).stdout.strip() == "job"
    scaled = json.loads(primus("scale", "job", "--role", "data", "--replicas", "2", *cluster).stdout)
    assert scaled["accepted"] is True
    stopped = primus("stop", "job", "--wait", *cluster)
    assert json.loads(stopped.stdout)["stop"] == "requested"
    status = json.loads(primus("status", "job", "--json", *cluster).stdout)
    assert status["phase"] == "Stopped" and status["replicas"]["data"] == 2
    types = [
        json.loads(line)["type"] for line in primus("events", "job", "--json", *cluster).stdout.splitlines()
    ]
    assert types[:2] == ["Submitted", "MasterStarted"]
    assert "ScaleRequested" in types and "Stopped" in types


def test_the_shipped_manifests_are_the_generated_ones() -> None:
    """docker/kubernetes/ is what the code generates (regenerate with the commands in docker/README.md)."""
    shipped = Path(__file__).parents[2] / "docker" / "kubernetes"
    assert (shipped / "crd.yaml").read_text() == primus("crd").stdout
    assert (shipped / "rbac.yaml").read_text() == primus("k8s", "manifests", "-n", "primus").stdout
    policy = primus("k8s", "network-policy", "example-job", "-n", "primus").stdout
    assert (shipped / "networkpolicy.yaml").read_text() == policy
