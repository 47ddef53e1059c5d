"""The PrimusJob CRD serves both contract versions on a real apiserver: one stored (the newest), and
a job created at either version reads back at the other as the same job."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_primus.contracts.crd import CRD_NAME, PLURAL, VERSION
from airflow_provider_primus.contracts.job import validate_job_spec
from airflow_provider_primus.contracts.versions import VERSIONS, convert
from airflow_provider_primus.kubernetes.client import resource_path
from tests.kube_env import KubeEnv

SPEC: dict[str, Any] = {
    "data": "/specs/data.yaml",
    "training": "/specs/training.yaml",
    "backend": {"type": "kubernetes"},
    "roles": {"data": {"replicas": {"min": 1, "initial": 2, "max": 4}, "resources": {"memory": "1Gi"}}},
}


def document(version: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"primus.dev/{version}",
        "kind": "PrimusJob",
        "metadata": {"name": name},
        "spec": SPEC,
    }


def test_the_crd_serves_every_version_and_stores_the_newest(kube: KubeEnv) -> None:
    served = kube.api().get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    versions = {v["name"]: (v["served"], v["storage"]) for v in served["spec"]["versions"]}
    assert versions == {"v1alpha1": (True, False), "v1beta1": (True, True)}
    assert VERSION == VERSIONS["PrimusJob"][-1] == "v1beta1"
    assert served["status"]["storedVersions"][-1] == "v1beta1"


@pytest.mark.parametrize(("written", "read"), [("v1alpha1", "v1beta1"), ("v1beta1", "v1alpha1")])
def test_a_job_written_at_one_version_reads_back_at_the_other(kube: KubeEnv, written: str, read: str) -> None:
    api = kube.api()
    name = f"at-{written}"
    api.create(resource_path(f"primus.dev/{written}", PLURAL, kube.namespace), document(written, name))
    there = api.get(resource_path(f"primus.dev/{read}", PLURAL, kube.namespace, name))
    assert there["apiVersion"] == f"primus.dev/{read}" and there["spec"] == SPEC
    # What the apiserver converted is what contracts/versions.py converts, and the same job.
    as_read = {k: there[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": name}}
    assert as_read == convert(document(written, name), read)
    assert validate_job_spec(as_read) == validate_job_spec(document(written, name))
    back = api.get(resource_path(f"primus.dev/{written}", PLURAL, kube.namespace, name))
    assert back["spec"] == SPEC and back["apiVersion"] == f"primus.dev/{written}"
