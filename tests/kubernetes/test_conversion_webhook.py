"""The conversion webhook (kubernetes/conversion.py) called by a real kube-apiserver: the CRD names it
by URL on this machine's loopback with the CA that signed its certificate; a job written at one
version reads back at the other through it."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.contracts.crd import CRD_NAME, PLURAL, crd, webhook_conversion
from airflow_provider_primus.contracts.versions import MODEL_ANNOTATION
from airflow_provider_primus.kubernetes.client import KubeApi, resource_path
from airflow_provider_primus.kubernetes.conversion import ConversionWebhook, review
from airflow_provider_primus.kubernetes.conversion_manifests import NAME
from airflow_provider_primus.kubernetes.install import apply, wait_established
from airflow_provider_primus.tls import JobCa
from tests.cli.test_jobs_cli import primus
from tests.kube_env import KubeEnv

SPEC: dict[str, Any] = {"data": "/specs/data.yaml", "backend": {"type": "kubernetes"}}
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"


@pytest.fixture
def webhook(kube: KubeEnv, tmp_path: Path) -> Iterator[ConversionWebhook]:
    """The webhook on 127.0.0.1 and the session CRD pointed at it; the CRD is put back after."""
    ca = JobCa.create("conversion-webhook")
    cert, key = ca.issue(["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    server = ConversionWebhook("127.0.0.1", 0, tmp_path / "tls.crt", tmp_path / "tls.key").start()
    api = kube.api()
    try:
        url = f"https://127.0.0.1:{server.port}/convert"
        apply(api, crd(webhook_conversion(ca.cert_pem, url=url)))
        wait_established(api, CRD_NAME, 60)
        yield server
    finally:
        apply(api, crd())
        wait_established(api, CRD_NAME, 60)
        server.stop()


def _job(version: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"primus.dev/{version}",
        "kind": "PrimusJob",
        "metadata": {"name": name},
        "spec": SPEC,
    }


def _read(api: KubeApi, version: str, namespace: str, name: str) -> dict[str, Any]:
    return api.get(resource_path(f"primus.dev/{version}", PLURAL, namespace, name))


def test_the_apiserver_converts_through_the_webhook_both_ways(
    kube: KubeEnv, webhook: ConversionWebhook
) -> None:
    api = kube.api()
    served = api.get(CRD_PATH)["spec"]["conversion"]
    assert served["strategy"] == "Webhook" and served["webhook"]["conversionReviewVersions"] == ["v1"]
    before = webhook.reviews
    # Written at v1alpha1: the apiserver converts it to the storage version (v1beta1) to store it.
    api.create(resource_path("primus.dev/v1alpha1", PLURAL, kube.namespace), _job("v1alpha1", "old"))
    assert webhook.reviews > before
    new = _read(api, "v1beta1", kube.namespace, "old")
    assert new["apiVersion"] == "primus.dev/v1beta1" and new["spec"] == SPEC
    # Written at v1beta1 (stored as it is), read at v1alpha1 through the webhook.
    api.create(resource_path("primus.dev/v1beta1", PLURAL, kube.namespace), _job("v1beta1", "new"))
    before = webhook.reviews
    old = _read(api, "v1alpha1", kube.namespace, "new")
    assert webhook.reviews > before
    assert old["apiVersion"] == "primus.dev/v1alpha1" and old["spec"] == SPEC
    listed = api.get(resource_path("primus.dev/v1alpha1", PLURAL, kube.namespace))
    assert {i["metadata"]["name"]: i["apiVersion"] for i in listed["items"]} == {
        "old": "primus.dev/v1alpha1",
        "new": "primus.dev/v1alpha1",
    }


def test_a_review_keeps_a_python_model_in_the_annotation_and_gives_it_back() -> None:
    """What the webhook answers for a document that v1alpha1 cannot express (the training kind's
    python model): the round trip through v1alpha1 is the object itself, metadata included."""
    beta = {
        "apiVersion": "primus.dev/v1beta1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"model": {"type": "python", "entrypoint": "two_tower:build", "options": {"tower": [8]}}},
    }
    down = review({"request": {"uid": "r1", "desiredAPIVersion": "primus.dev/v1alpha1", "objects": [beta]}})
    assert down["response"]["uid"] == "r1" and down["response"]["result"] == {"status": "Success"}
    (alpha,) = down["response"]["convertedObjects"]
    assert json.loads(alpha["metadata"]["annotations"][MODEL_ANNOTATION])["entrypoint"] == "two_tower:build"
    up = review({"request": {"uid": "r2", "desiredAPIVersion": "primus.dev/v1beta1", "objects": [alpha]}})
    assert up["response"]["convertedObjects"] == [beta]


def test_a_review_it_cannot_answer_fails_naming_why() -> None:
    job = _job("v1beta1", "j")
    answer = review({"request": {"uid": "r", "desiredAPIVersion": "primus.dev/v2", "objects": [job]}})
    result = answer["response"]["result"]
    assert result["status"] == "Failure" and "PrimusJob has no version 'primus.dev/v2'" in result["message"]
    assert answer["response"]["convertedObjects"] == []


def test_install_deploys_the_webhook_and_gives_the_crd_its_ca(kube: KubeEnv, tmp_path: Path) -> None:
    """``primus k8s install --conversion-webhook``: the Deployment, Service and serving Secret in the
    namespace, the CRD calling the Service with the CA that signed the Secret's certificate (kept by a
    second install), and that certificate accepted by a client dialling the Service's name."""
    config = str(kube.kubeconfig())
    api = kube.api()
    bundles = []
    try:
        for _ in range(2):
            out = primus(
                "k8s", "install", "--kubeconfig", config, "--conversion-webhook", "-n", kube.namespace
            )
            assert f"conversion webhook applied in namespace {kube.namespace}" in out.stdout
            client = api.get(CRD_PATH)["spec"]["conversion"]["webhook"]["clientConfig"]
            assert client["service"] == {
                "namespace": kube.namespace,
                "name": NAME,
                "path": "/convert",
                "port": 443,
            }
            bundles.append(client["caBundle"])
    finally:
        apply(api, crd())
        wait_established(api, CRD_NAME, 60)
    assert bundles[0] == bundles[1]  # the second install kept the pair the CRD trusts
    secret = api.get(resource_path("v1", "secrets", kube.namespace, NAME))["data"]
    assert secret["ca.crt"] == bundles[0]
    deployment = api.get(resource_path("apps/v1", "deployments", kube.namespace, NAME))
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == NAME
    assert pod["containers"][0]["command"][:3] == ["primus", "k8s", "conversion-webhook"]
    api.get(resource_path("v1", "services", kube.namespace, NAME))
    # The Secret's certificate, served as the pod serves it, verifies under the Service's DNS name.
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_bytes(base64.b64decode(secret[name]))
    server = ConversionWebhook("127.0.0.1", 0, tmp_path / "tls.crt", tmp_path / "tls.key").start()
    try:
        context = ssl.create_default_context(cadata=base64.b64decode(bundles[0]).decode())
        host = f"{NAME}.{kube.namespace}.svc"
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert tls.recv(1024).startswith(b"HTTP/1.0 200")
    finally:
        server.stop()
