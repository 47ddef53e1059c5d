"""The PrimusJob CRD: generated from the contract models, accepted by a real apiserver, and refusing
what local validation refuses — at the same field paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_primus.contracts.crd import CRD_NAME, crd, openapi_schema
from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.job import MAX_REPLICAS, validate_job_spec
from airflow_provider_primus.kubernetes.store import KubeJobStore
from tests.kube_env import KubeEnv

Doc = dict[str, Any]


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, sub in (node.get("properties") or {}).items():
            out += walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_the_schema_is_structural() -> None:
    """What the apiserver demands of a CRD schema: every node typed (or int-or-string, or open), no
    references, no unions, no additionalProperties: false."""
    for path, node in walk(openapi_schema()):
        assert "$ref" not in node and "anyOf" not in node and "$defs" not in node, path
        assert node.get("additionalProperties") is not False, path
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"


def test_the_schema_follows_the_models() -> None:
    spec = openapi_schema()["properties"]["spec"]
    assert spec["required"] == ["data"]
    replicas = spec["properties"]["roles"]["properties"]["data"]["properties"]["replicas"]
    assert replicas["properties"]["min"] == {"minimum": 0, "maximum": MAX_REPLICAS, "type": "integer"}
    backend = spec["properties"]["backend"]["properties"]
    assert backend["type"]["enum"] == ["local", "kubernetes", "yarn"]
    assert backend["yarn"]["properties"]["on_resize_refused"]["enum"] == ["keep", "recreate"]
    assert backend["kubernetes"]["properties"]["on_resize_refused"]["enum"] == ["keep", "recreate"]
    window = spec["properties"]["data_service"]["properties"]["window"]
    assert (window["minimum"], window["exclusiveMinimum"]) == (0, True)
    memory = spec["properties"]["roles"]["properties"]["data"]["properties"]["resources"]["properties"][
        "memory"
    ]
    assert memory["x-kubernetes-int-or-string"] is True and "type" not in memory
    version = crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.desired.scale.data"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Roles", "Data", "Age"]


def job(**spec: Any) -> Doc:
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": "j"},
        "spec": {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}, **spec},
    }


def without_data() -> Doc:
    doc = job()
    del doc["spec"]["data"]
    return doc


def role(**fields: Any) -> Doc:
    return {"roles": {"data": fields}}


INVALID: list[tuple[str, Doc]] = [
    ("unknown field", job(roles={"data": {"replicaz": {"min": 1}}})),
    ("enum", job(backend={"type": "mesos"})),
    ("negative", job(**role(replicas={"min": -1}))),
    ("initial below min", job(**role(replicas={"min": 3, "initial": 2}))),
    ("max below min", job(**role(replicas={"min": 2, "max": 1}))),
    ("no trainer", job(roles={"trainer": {"replicas": {"min": 0}}})),
    ("bad quantity", job(**role(resources={"memory": "12Qi"}))),
    ("tiny memory", job(**role(resources={"memory": "1Mi"}))),
    ("cpu bound above request", job(**role(resources={"cpu": 1, "bounds": {"cpu": {"min": 2}}}))),
    (
        "memory bound below request",
        job(**role(resources={"memory": "1Gi", "bounds": {"memory": {"max": "512Mi"}}})),
    ),
    (
        "trainer memory bound below its default",
        job(roles={"trainer": {"resources": {"bounds": {"memory": {"max": "2Gi"}}}}}),
    ),
    ("missing data", without_data()),
    ("kubernetes settings with local", job(backend={"type": "local", "kubernetes": {"namespace": "x"}})),
    ("yarn settings with local", job(backend={"yarn": {"queue": "q"}})),
    ("zero window", job(data_service={"window": 0})),
    ("fraction", job(scaling={"targets": {"cpu_utilization": 1.5}})),
    ("list item", job(scaling={"actions": ["scale_up"]})),
]


def local_paths(doc: Doc) -> set[str]:
    with pytest.raises(SpecError) as exc:
        validate_job_spec(doc)
    return {i.path for i in exc.value.issues}


@pytest.mark.parametrize(("case", "doc"), INVALID, ids=[c for c, _ in INVALID])
def test_the_apiserver_refuses_what_local_validation_refuses(kube: KubeEnv, case: str, doc: Doc) -> None:
    store = KubeJobStore(kube.api(), kube.namespace)
    expected = local_paths(doc)
    with pytest.raises(SpecError) as exc:
        store.create("j", copy.deepcopy(doc))
    assert {i.path for i in exc.value.issues} == expected, str(exc.value)
    assert store.find() == []


def test_a_valid_job_is_accepted_as_written(kube: KubeEnv) -> None:
    doc = job(
        roles={
            "data": {
                "replicas": {"min": 1, "initial": 2, "max": 8},
                "resources": {"cpu": 0.5, "memory": "512Mi", "bounds": {"cpu": {"max": 2}}},
            }
        },
        scaling={"targets": {"cpu_utilization": 0.7}},
    )
    validate_job_spec(doc)
    record = KubeJobStore(kube.api(), kube.namespace).create("j", doc, {"team": "ml"})
    assert record.labels == {"team": "ml"}
    data = record.spec["spec"]["roles"]["data"]
    assert data["resources"] == {"cpu": "500m", "memory": "512Mi", "bounds": {"cpu": {"max": 2}}}
    validate_job_spec(record.spec)  # what the apiserver stored reads back as the same job


def test_the_crd_is_served_with_its_printer_columns(kube: KubeEnv) -> None:
    served = kube.api().get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    conditions = {c["type"]: c["status"] for c in served["status"]["conditions"]}
    assert conditions["Established"] == "True"
    version = served["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
