"""A namespace per test on the session's real control plane, with the CRD and the shipped RBAC.

The static-token users of the cluster stand for the identities a deployment has: ``primus-master``
is bound to the master's Role exactly as shipped (so a test passing with it proves the RBAC is
enough), ``no-resize`` to the same Role without ``pods/resize`` (a cluster that refuses in-place
resizes), ``airflow`` to the submitter Role.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.crd import CRD_NAME, crd
from airflow_provider_primus.kubernetes.client import KubeApi
from airflow_provider_primus.kubernetes.install import apply, wait_established
from airflow_provider_primus.kubernetes.manifests import (
    CRD_READER,
    MASTER_ACCOUNT,
    MASTER_RULES,
    SUBMITTER_ROLE,
    rbac,
)

MASTER_USER = "primus-master"
NO_RESIZE_USER = "no-resize"
SUBMITTER_USER = "airflow"
USERS: dict[str, list[str]] = {MASTER_USER: [], NO_RESIZE_USER: [], SUBMITTER_USER: []}
_counter = itertools.count()


@dataclass
class KubeEnv:
    cluster: Any  # KubeCluster
    namespace: str

    def api(self, user: str = "admin") -> KubeApi:
        return KubeApi(self.cluster.api_client(user))

    def kubeconfig(self, user: str = "admin") -> Path:
        path: Path = self.cluster.kubeconfig(user)
        return path


def install_crd(api: KubeApi) -> None:
    apply(api, crd())
    wait_established(api, CRD_NAME, 60)


def _binding(
    kind: str, name: str, namespace: str | None, *, role: tuple[str, str], user: str
) -> dict[str, Any]:
    role_kind, role_name = role
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def new_namespace(cluster: Any, api: KubeApi) -> str:
    """A fresh namespace with the shipped RBAC, bound to the test users as a deployment binds them."""
    name = f"t{next(_counter)}-{id(cluster) % 10_000}"
    cluster.create_namespace(name)
    for doc in rbac(name):
        apply(api, doc)
    no_resize_rules = [r for r in MASTER_RULES if r["resources"] != ["pods/resize"]]
    apply(
        api,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "master-without-resize", "namespace": name},
            "rules": no_resize_rules,
        },
    )
    for doc in (
        _binding("RoleBinding", "master-user", name, role=("Role", MASTER_ACCOUNT), user=MASTER_USER),
        _binding(
            "RoleBinding", "no-resize-user", name, role=("Role", "master-without-resize"), user=NO_RESIZE_USER
        ),
        _binding("RoleBinding", "submitter-user", name, role=("Role", SUBMITTER_ROLE), user=SUBMITTER_USER),
        _binding(
            "ClusterRoleBinding",
            f"crd-reader-{name}",
            None,
            role=("ClusterRole", CRD_READER),
            user=MASTER_USER,
        ),
    ):
        apply(api, doc)
    return name
