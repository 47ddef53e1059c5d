"""The objects of a job on a cluster, as plain manifests: RBAC, the master's driver pod (``primus k8s
manifests`` prints them), the documents ConfigMap, owner references and the labels they share.

The master gets exactly what it uses, in its namespace: its PrimusJob objects and their status, the
pods it launches (with ``pods/resize`` for in-place vertical scaling), events, the documents
ConfigMap, and reading the job's token Secret. Nothing cluster-wide except reading the CRD. A
separate ``primus-submitter`` Role is what an Airflow connection's identity needs to submit, watch
and cancel jobs.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from airflow_provider_primus import __version__
from airflow_provider_primus.contracts.crd import CRD_NAME, GROUP, PLURAL
from airflow_provider_primus.contracts.job import POD_HOME, KubernetesBackend, format_memory
from airflow_provider_primus.tls import ADVERTISE_ENV

DEFAULT_IMAGE = f"airflow-provider-primus:{__version__}"
LABEL_JOB = "primus.dev/job"
LABEL_ROLE = "primus.dev/role"
LABEL_INDEX = "primus.dev/index"
LABEL_INCARNATION = "primus.dev/incarnation"
LABEL_EXECUTOR = "primus.dev/executor"
MASTER_ACCOUNT = "primus-master"
SUBMITTER_ROLE = "primus-submitter"
CRD_READER = "primus-crd-reader"
_PART_OF = {"app.kubernetes.io/part-of": "airflow-provider-primus"}


def _rule(
    groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


MASTER_RULES = [
    _rule([GROUP], [PLURAL], ["get", "list", "watch", "update", "patch"]),
    _rule([GROUP], [f"{PLURAL}/status"], ["get", "update", "patch"]),
    # patch: a new master tells the pods it adopts where its dispatcher is (an annotation).
    _rule([""], ["pods"], ["get", "list", "watch", "create", "delete", "patch"]),
    _rule([""], ["pods/resize"], ["patch"]),
    _rule([""], ["events"], ["create", "list"]),
    _rule([""], ["configmaps"], ["get", "create"]),
    _rule([""], ["secrets"], ["get"]),
]

SUBMITTER_RULES = [
    _rule([GROUP], [PLURAL], ["get", "list", "watch", "create", "update", "patch", "delete"]),
    _rule([GROUP], [f"{PLURAL}/scale"], ["get", "update", "patch"]),
    _rule([""], ["secrets", "configmaps"], ["create", "update", "get"]),
    _rule([""], ["events"], ["create", "list"]),
    _rule([""], ["pods"], ["get", "list", "watch", "create", "delete"]),  # the master's driver pod
    _rule(["networking.k8s.io"], ["networkpolicies"], ["create", "update", "get"]),  # the job's own
]


def rbac(namespace: str) -> list[dict[str, Any]]:
    meta = {"namespace": namespace, "labels": dict(_PART_OF)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": MASTER_ACCOUNT, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": MASTER_ACCOUNT, **meta},
            "rules": MASTER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": MASTER_ACCOUNT, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MASTER_ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": MASTER_ACCOUNT, "namespace": namespace}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": SUBMITTER_ROLE, **meta},
            "rules": SUBMITTER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": CRD_READER, "labels": dict(_PART_OF)},
            "rules": [_rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get"], [CRD_NAME])],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{CRD_READER}-{namespace}", "labels": dict(_PART_OF)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CRD_READER},
            "subjects": [{"kind": "ServiceAccount", "name": MASTER_ACCOUNT, "namespace": namespace}],
        },
    ]


def master_pod(
    job: str,
    namespace: str,
    image: str,
    documents: list[str],
    owner: dict[str, Any] | None = None,
    *,
    env: list[dict[str, Any]] | None = None,
    kube: KubernetesBackend | None = None,
) -> dict[str, Any]:
    """The job's master as a driver pod: its ServiceAccount, the documents at their paths, the
    job's volumes mounted as ``kube.mounts.master`` says, the control API and dispatcher on the
    pod's IP (executors dial the advertised address). ``env``: more entries (the object-store
    Secrets the master's planner reads through, by ``secretKeyRef``)."""
    meta: dict[str, Any] = {
        "name": f"{job}-master",
        "namespace": namespace,
        "labels": {LABEL_JOB: job, LABEL_ROLE: "master", **_PART_OF},
    }
    if owner:
        meta["ownerReferences"] = [owner]
    volumes, mounts = pod_storage(job, documents, kube, "master")
    container: dict[str, Any] = {
        "name": "master",
        "image": image,
        "command": ["primus", "master", job, "--namespace", namespace],
        "env": [
            {
                "name": ADVERTISE_ENV,
                "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
            },
            {"name": "PRIMUS_HOME", "value": POD_HOME},
            *(env or []),
        ],
        "envFrom": [connections_env_from(job)],
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
        "volumeMounts": mounts,
    }
    if kube is not None and kube.image_pull_policy:
        container["imagePullPolicy"] = kube.image_pull_policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "serviceAccountName": MASTER_ACCOUNT,
            "restartPolicy": "OnFailure",
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": volumes,
        },
    }


CONTROL_CLIENT_LABEL = "primus.dev/control-client"  # pods (Airflow's) that may call a job's master


def network_policies(
    job: str,
    namespace: str,
    owner: Mapping[str, Any] | None = None,
    *,
    control_port: int = 0,
    control_from: list[str] | None = None,
) -> list[dict[str, Any]]:
    """A job's NetworkPolicies (owned by it, so they go with it). ``<job>-isolation``: the job's
    pods (master, data executors, trainers) accept connections only from the job's own pods, so no
    other pod reaches its executors' Flight ports. ``<job>-control``: the master also accepts its
    control API from pods labelled ``primus.dev/control-client: "true"`` in any namespace (where the
    Airflow hook and UI run) and from ``control_from`` (CIDRs: an Airflow outside the cluster);
    ``control_port`` limits that to the API's port when the job fixes one. Policies add up: a pod
    selected by any accepts what any allows. They take effect where the cluster's network plugin
    enforces NetworkPolicy."""
    own = {LABEL_JOB: job}

    def policy(
        name: str, selector: dict[str, str], peers: list[dict[str, Any]], ports: Any
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {**own, **_PART_OF}}
        if owner:
            meta["ownerReferences"] = [dict(owner)]
        rule: dict[str, Any] = {"from": peers}
        if ports:
            rule["ports"] = ports
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta,
            "spec": {
                "podSelector": {"matchLabels": dict(selector)},
                "policyTypes": ["Ingress"],
                "ingress": [rule],
            },
        }

    callers: list[dict[str, Any]] = [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {CONTROL_CLIENT_LABEL: "true"}}},
        *({"ipBlock": {"cidr": cidr}} for cidr in control_from or ()),
    ]
    ports = [{"protocol": "TCP", "port": control_port}] if control_port else None
    return [
        policy(f"{job}-isolation", own, [{"podSelector": {"matchLabels": dict(own)}}], None),
        policy(f"{job}-control", {**own, LABEL_ROLE: "master"}, callers, ports),
    ]


def connections_secret_name(job: str) -> str:
    return f"{job}-connections"


def connections_secret(job: str, env: Mapping[str, str], owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Airflow connections a job's data document names (``aws`` and ``kafka``), resolved where
    Airflow is, as the environment its processes read them from (``hooks/connection.storage_environment``):
    one Secret owned by the job, which the master's and every executor's pod take in whole through
    ``envFrom`` (the values never appear in a pod spec, a log or an event)."""
    meta: dict[str, Any] = {"name": connections_secret_name(job), "labels": {LABEL_JOB: job}}
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in env.items()},
    }


def connections_env_from(job: str) -> dict[str, Any]:
    """A container's ``envFrom`` entry for the job's connections Secret; optional, since a job whose
    document names no connection (or one submitted without Airflow) has none."""
    return {"secretRef": {"name": connections_secret_name(job), "optional": True}}


def pod_storage(
    job: str, documents: list[str], kube: KubernetesBackend | None, role: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes and mounts of ``role``'s pods: the documents (a ConfigMap, each file at the path
    the job names it by, so commands need no rewriting), the job's volumes that the role mounts,
    and an emptyDir at PRIMUS_HOME unless one of those covers it (the trainer writes its
    checkpoints under it; the image's user cannot create it in the image's file system)."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if documents:
        volumes.append({"name": "documents", "configMap": {"name": documents_configmap_name(job)}})
        mounts += [
            {"name": "documents", "mountPath": path, "subPath": document_key(i), "readOnly": True}
            for i, path in enumerate(documents)
        ]
    declared = {v.name: v for v in kube.volumes} if kube is not None else {}
    used: list[str] = []
    for mount in kube.mounts.of(role) if kube is not None else []:
        entry: dict[str, Any] = {"name": _volume_name(mount.volume), "mountPath": mount.path}
        if mount.read_only:
            entry["readOnly"] = True
        if mount.sub_path:
            entry["subPath"] = mount.sub_path
        mounts.append(entry)
        if mount.volume not in used:
            used.append(mount.volume)
    for name in used:
        v = declared[name]
        volume: dict[str, Any] = {"name": _volume_name(name)}
        if v.persistent_volume_claim is not None:
            claim = v.persistent_volume_claim
            volume["persistentVolumeClaim"] = {"claimName": claim.claim_name, "readOnly": claim.read_only}
        elif v.config_map is not None:
            volume["configMap"] = {"name": v.config_map.name, "optional": v.config_map.optional}
        elif v.empty_dir is not None:
            empty: dict[str, Any] = {}
            if v.empty_dir.medium:
                empty["medium"] = v.empty_dir.medium
            if v.empty_dir.size_limit is not None:
                empty["sizeLimit"] = format_memory(v.empty_dir.size_limit)
            volume["emptyDir"] = empty
        volumes.append(volume)
    if not any(m["mountPath"] == POD_HOME for m in mounts):
        volumes.append({"name": "home", "emptyDir": {}})
        mounts.append({"name": "home", "mountPath": POD_HOME})
    return volumes, mounts


def _volume_name(declared: str) -> str:
    """A declared volume's name in the pod: prefixed, so it never meets ``documents`` or ``home``
    (at most 63 characters, like the declared name: a long one is cut and made unique by a hash)."""
    name = f"v-{declared}"
    if len(name) <= 63:
        return name
    return f"{name[:54]}-{hashlib.sha256(declared.encode()).hexdigest()[:8]}"


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """A reference to the PrimusJob resource: the garbage collector deletes what it owns."""
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def document_key(i: int) -> str:
    return f"document-{i}.yaml"


def documents_configmap(
    job: str, documents: Mapping[str, str], owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ConfigMap of a job's documents (path → text), keyed ``document-<i>.yaml`` in path order."""
    meta: dict[str, Any] = {"name": documents_configmap_name(job), "labels": {LABEL_JOB: job}}
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {document_key(i): text for i, text in enumerate(documents.values())},
    }


def documents_configmap_name(job: str) -> str:
    """The job's documents (data, training) as one ConfigMap, mounted into the master and every
    executor at the paths the job names them by."""
    return f"{job}-documents"
