"""The Kubernetes backend: executors are pods, resized in place through ``pods/resize``.

It implements the executor contract of ``resources/backend.py`` so the master, the dispatcher and the
autoscaler are the same on a laptop and on a cluster. What is specific here:

* **Identity.** A pod is named ``<job>-<role>-<index>-<incarnation>``: a create that the master
  repeats after a crash (it launched, then died before recording it) meets 409 and adopts the pod
  it already made instead of starting a duplicate. Pods carry labels for job, role, index and
  incarnation and an owner reference to the PrimusJob, so deleting the job garbage-collects them.
* **Secrets.** The job token reaches a pod from the job's Secret (``secretKeyRef``), never as a
  plain value in the pod spec.
* **Watch, don't poll.** One informer watches the job's pods; ``observe`` reads that cache and
  costs no request, so an idle reconcile pass is as cheap at 1,000 executors as at 10.
* **Vertical scaling in place.** ``resize`` patches the ``resize`` subresource (Kubernetes 1.33+);
  requests equal limits, so the pod stays in the Guaranteed QoS class and the kubelet applies the
  change without a restart (``resizePolicy: NotRequired``). Where the cluster refuses (an old
  apiserver, RBAC without ``pods/resize``, an admission policy), the refusal is reported as a
  ``ResizeRefused`` event and ``on_resize_refused`` decides: ``keep`` the old allotment (default)
  or ``recreate`` the executor with the new one (the master sees it end and restarts it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.job import KubernetesBackend as KubernetesSettings
from airflow_provider_primus.contracts.job import is_loopback
from airflow_provider_primus.contracts.training import PrimusTraining
from airflow_provider_primus.credentials import TOKEN_ENV, token_env_from_secret
from airflow_provider_primus.data.service.dispatcher_server import LOCATION_FILE_ENV
from airflow_provider_primus.kubernetes.client import (
    STRATEGIC_PATCH,
    KubeApi,
    KubeError,
    parse_time,
    resource_path,
)
from airflow_provider_primus.kubernetes.informer import Informer
from airflow_provider_primus.kubernetes.manifests import (
    LABEL_EXECUTOR,
    LABEL_INCARNATION,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
    connections_env_from,
    documents_configmap,
    pod_storage,
)
from airflow_provider_primus.process import EXIT_FILE_ENV
from airflow_provider_primus.resources.backend import Allotment, Handle, LaunchRequest, Observation
from airflow_provider_primus.resources.own_usage import OWN_CGROUP_ENV
from airflow_provider_primus.tls import ADVERTISE_ENV, TLS_DIR_ENV, TLS_MOUNT, tls_secret_name

log = logging.getLogger(__name__)

CONTAINER = "executor"
POD_FS_GROUP = 10001  # the project image's user and group (docker/Dockerfile); any group would do
# Where the pod's dispatcher is: an annotation the master sets at launch and rewrites when a new
# master (a new pod, a new IP) adopts the pod; the pod reads it from a downward API file.
DISPATCHER_ANNOTATION = "primus.dev/dispatcher"
POD_INFO = "/etc/primus/pod"
DATA_PORT = 50051  # the data executor's Flight port inside its pod (readiness is probed on it)
ORPHAN_GRACE_S = 30.0


def cpu_quantity(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def pod_name(job: str, role: str, index: int, incarnation: int) -> str:
    return f"{job}-{role}-{index}-{incarnation}"


@dataclass
class PodTemplate:
    """What every executor pod of a job shares."""

    job: str
    namespace: str
    image: str
    owner: dict[str, Any] | None = None
    token_env: str = TOKEN_ENV
    documents: dict[str, str] = field(default_factory=dict)  # local path → file content
    service_account: str | None = None
    python: str = "python"
    # Executors bind their pod's own address (expanded by the kubelet from the downward API), not
    # every interface: a job that asks for another host (``control.host: 0.0.0.0``) keeps it.
    bind_host: str = f"$({ADVERTISE_ENV})"
    # Object-store key pairs the data document takes from Secrets: env entries with secretKeyRef,
    # so a key reaches the executor's environment without passing through the master or the API.
    secret_env: list[dict[str, Any]] = field(default_factory=list)
    # The job's backend.kubernetes: per-role images, volumes and mounts, the pull policy.
    settings: KubernetesSettings | None = None

    def image_of(self, role: str) -> str:
        return (self.settings.image_of(role) if self.settings else None) or self.image


class KubernetesBackend:
    parallel_launch = True  # a launch is one create request; the master may issue many at once

    def __init__(
        self,
        api: KubeApi,
        template: PodTemplate,
        *,
        on_event: Callable[[str, str, dict[str, Any]], None] | None = None,
        on_resize_refused: Literal["keep", "recreate"] = "keep",
        dispatcher: Callable[[], str | None] | None = None,
    ) -> None:
        """``dispatcher``: the master's dispatcher location now; an adopted pod that was told
        another one (its previous master's) is told this one."""
        self.dispatcher = dispatcher
        self.api = api
        self.t = template
        self.on_event = on_event
        self.on_resize_refused = on_resize_refused
        self.pods_path = resource_path("v1", "pods", template.namespace)
        self._terminated: dict[str, str] = {}  # pod name → why we ended it
        self._lock = threading.Lock()
        self._documents_ready = not template.documents
        self.informer = Informer(api, self.pods_path, label_selector=f"{LABEL_JOB}={template.job}").start()

    # --- launching ----------------------------------------------------------------------------------

    def _labels(self, role: str, index: int, incarnation: int, name: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "primus-executor",
            "app.kubernetes.io/managed-by": "primus-master",
            LABEL_JOB: self.t.job,
            LABEL_ROLE: role,
            LABEL_INDEX: str(index),
            LABEL_INCARNATION: str(incarnation),
            LABEL_EXECUTOR: name,
        }

    def _ensure_documents(self) -> None:
        """Submission made the ConfigMap; a job submitted otherwise gets it here (idempotent)."""
        if self._documents_ready:
            return
        body = documents_configmap(self.t.job, self.t.documents, self.t.owner)
        try:
            self.api.create(resource_path("v1", "configmaps", self.t.namespace), body)
        except KubeError as exc:
            if exc.status != 409:
                raise
        self._documents_ready = True

    def _command(self, command: Sequence[str], role: str) -> list[str]:
        out = list(command)
        if out and out[0] == sys.executable:
            out[0] = self.t.python  # the image's interpreter, not the master's
        if "--host" in out:
            # Peers reach a pod on its IP (advertised from the downward API); the token guards it.
            at = out.index("--host") + 1
            if is_loopback(out[at]):  # the default: the pod's own address; a wildcard only when asked
                out[at] = self.t.bind_host
            if role == "data":  # a fixed port: the readiness probe's (the argv's own is 0, any)
                if "--port" in out[:-1]:
                    out[out.index("--port") + 1] = str(DATA_PORT)
                else:
                    out[at + 1 : at + 1] = ["--port", str(DATA_PORT)]
        return out

    def pod_manifest(self, request: LaunchRequest) -> dict[str, Any]:
        role, index, allotment, command, env = (
            request.role,
            request.index,
            request.allotment,
            request.command,
            request.env,
        )
        quantities = {"cpu": cpu_quantity(allotment.cpu), "memory": str(allotment.memory)}
        variables: list[dict[str, Any]] = [
            # First: ``$(PRIMUS_ADVERTISE_HOST)`` in the command expands only to a variable defined
            # before it is used.
            {"name": ADVERTISE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        ]
        tls = TLS_DIR_ENV in env
        for key, value in env.items():
            if key == EXIT_FILE_ENV:
                continue  # a file on the master's machine; a pod's status carries its exit code
            if key == self.t.token_env:
                variables.append(token_env_from_secret(self.t.job, key))
            elif key == TLS_DIR_ENV:  # the master's folder; in a pod the job's TLS Secret, mounted
                variables.append({"name": key, "value": TLS_MOUNT})
            else:
                variables.append({"name": key, "value": value})
        # A container is its own cgroup: the executor measures its use there and pushes it.
        variables.append({"name": OWN_CGROUP_ENV, "value": "1"})
        variables.extend(self.t.secret_env)
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": self.t.image_of(role),
            "command": self._command(command, role),
            "env": variables,
            # The Airflow connections (aws, kafka) the job's data names, resolved by the hook.
            "envFrom": [connections_env_from(self.t.job)],
            "resources": {"requests": dict(quantities), "limits": dict(quantities)},
            "resizePolicy": [
                {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                {"resourceName": "memory", "restartPolicy": "NotRequired"},
            ],
        }
        if self.t.settings is not None and self.t.settings.image_pull_policy:
            container["imagePullPolicy"] = self.t.settings.image_pull_policy
        if role == "data":
            container["ports"] = [{"name": "flight", "containerPort": DATA_PORT}]
            container["readinessProbe"] = {"tcpSocket": {"port": "flight"}, "periodSeconds": 5}
        volumes, mounts = pod_storage(self.t.job, list(self.t.documents), self.t.settings, role)
        if tls:  # the job's CA: the executor issues itself a certificate for its pod's address
            # Group-readable for the pod's fsGroup (below): the image runs as a non-root user, which
            # could not read a root-owned 0400 file, and no one outside the pod's group can.
            secret = {"secretName": tls_secret_name(self.t.job), "defaultMode": 0o440}
            volumes.append({"name": "tls", "secret": secret})
            mounts.append({"name": "tls", "mountPath": TLS_MOUNT, "readOnly": True})
        location = _argument(command, "--dispatcher")
        if location is not None:
            variables.append({"name": LOCATION_FILE_ENV, "value": f"{POD_INFO}/dispatcher"})
            item = {
                "path": "dispatcher",
                "fieldRef": {"fieldPath": f"metadata.annotations['{DISPATCHER_ANNOTATION}']"},
            }
            volumes.append({"name": "pod-info", "downwardAPI": {"items": [item]}})
            mounts.append({"name": "pod-info", "mountPath": POD_INFO, "readOnly": True})
        container["volumeMounts"] = mounts
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [container],
            "enableServiceLinks": False,
            # Volumes (the CA Secret, a claim) are group-owned by this group, which the container's
            # process holds whatever user the image runs as.
            **({"securityContext": {"fsGroup": POD_FS_GROUP}} if tls else {}),
            "volumes": volumes,
        }
        if self.t.service_account:
            spec["serviceAccountName"] = self.t.service_account
        meta: dict[str, Any] = {
            "name": pod_name(self.t.job, role, index, request.incarnation),
            "labels": self._labels(role, index, request.incarnation, request.name),
        }
        if location is not None:
            meta["annotations"] = {DISPATCHER_ANNOTATION: location}
        if self.t.owner:
            meta["ownerReferences"] = [self.t.owner]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def launch(self, request: LaunchRequest) -> Handle:
        self._ensure_documents()
        body = self.pod_manifest(request)
        allotment = request.allotment
        pod = body["metadata"]["name"]
        try:
            created = self.api.create(self.pods_path, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            # Made by an earlier master that died before recording it: adopt, never duplicate.
            created = self.api.get(f"{self.pods_path}/{pod}")
            if created["metadata"].get("deletionTimestamp"):
                raise RuntimeError(f"pod {pod} is still terminating; retrying on the next pass") from None
            existing = _allotment(created)
            allotment = existing or allotment
        return Handle(
            request.name,
            request.role,
            request.index,
            allotment,
            {"pod": pod, "uid": created["metadata"]["uid"], "namespace": self.t.namespace},
        )

    # --- changing -------------------------------------------------------------------------------------

    def resize(self, handle: Handle, allotment: Allotment) -> Handle:
        pod = handle.ref["pod"]
        quantities = {"cpu": cpu_quantity(allotment.cpu), "memory": str(allotment.memory)}
        patch = {
            "spec": {
                "containers": [
                    {"name": CONTAINER, "resources": {"requests": quantities, "limits": dict(quantities)}}
                ]
            }
        }
        try:
            self.api.patch(f"{self.pods_path}/{pod}/resize", patch, content_type=STRATEGIC_PATCH)
        except KubeError as exc:
            self._emit(
                "ResizeRefused",
                handle.name,
                {
                    "reason": f"{handle.name}: the cluster refused the in-place resize ({exc}); "
                    + (
                        "keeping the current allotment"
                        if self.on_resize_refused == "keep"
                        else "recreating the pod"
                    ),
                    "cpu": allotment.cpu,
                    "memory": allotment.memory,
                    "status": exc.status,
                },
            )
            if self.on_resize_refused == "keep":
                return handle
            self._delete(pod, "resize refused: recreated with the new allotment", grace_s=10)
        return Handle(handle.name, handle.role, handle.index, allotment, dict(handle.ref))

    def terminate(self, handle: Handle, grace_s: float = 10.0) -> None:
        self._delete(handle.ref["pod"], "terminated", grace_s)

    def _delete(self, pod: str, why: str, grace_s: float) -> None:
        with self._lock:
            self._terminated[pod] = why
        with contextlib.suppress(KubeError):
            self.api.delete(f"{self.pods_path}/{pod}", {"gracePeriodSeconds": int(grace_s)})

    # --- observing ------------------------------------------------------------------------------------

    def observe(self, handles: Sequence[Handle]) -> dict[str, Observation]:
        now = time.monotonic()
        out: dict[str, Observation] = {}
        for h in handles:
            pod = self._current(h)
            with self._lock:
                ours = self._terminated.get(h.ref["pod"])
            if pod is None or pod["metadata"].get("uid") != h.ref.get("uid"):
                out[h.name] = Observation(h.name, now, False, reason=ours or "pod deleted")
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                code, reason = _termination(pod)
                out[h.name] = Observation(h.name, now, False, exit_code=code, reason=ours or reason)
            elif pod["metadata"].get("deletionTimestamp") and ours is None:
                out[h.name] = Observation(h.name, now, False, reason="pod deleted")
            else:
                out[h.name] = Observation(h.name, now, True)
        self._collect_orphans(handles)
        return out

    def _current(self, handle: Handle) -> dict[str, Any] | None:
        """The handle's pod as the informer has it or, where the informer has not (yet) seen that
        pod, as the API server has it. A pod created a moment ago may not have reached the watch: on
        a loaded machine that lag took whole reconcile passes, and every such pass declared a healthy
        new pod deleted and launched yet another incarnation."""
        pod = self.informer.get(handle.ref["pod"])
        if pod is not None and pod["metadata"].get("uid") == handle.ref.get("uid"):
            return pod
        try:
            return self.api.get(f"{self.pods_path}/{handle.ref['pod']}")
        except KubeError as exc:
            if exc.status == 404:
                return None
            return pod  # the API server unreachable: what the informer last knew

    def _collect_orphans(self, handles: Sequence[Handle]) -> None:
        """Pods of this job no executor record names (a master that died between creating a pod and
        recording it, then chose another incarnation): deleted once they are older than a grace."""
        known = {h.ref.get("pod") for h in handles}
        cutoff = time.time() - ORPHAN_GRACE_S
        for pod in self.informer.items():
            meta = pod["metadata"]
            name = meta["name"]
            if name in known or meta.get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                # A finished executor's (or an earlier incarnation's) pod: it holds no resources and
                # keeps its log for ``kubectl logs``, as a Job's pods do; the job's deletion removes
                # it (owner reference). Not an orphan to report.
                continue
            if LABEL_EXECUTOR not in (meta.get("labels") or {}):
                continue  # not an executor: the job's master pod carries the job's label too
            with self._lock:
                if name in self._terminated:
                    continue
            if _created(meta) > cutoff:
                continue
            self._emit(
                "OrphanDeleted",
                meta.get("labels", {}).get(LABEL_EXECUTOR, name),
                {"reason": f"deleting orphaned pod {name}"},
            )
            self._delete(name, "orphan", grace_s=10)

    def adopt(self, handle: Handle) -> bool:
        pod = self.informer.get(handle.ref.get("pod", ""))
        if pod is None or pod["metadata"].get("uid") != handle.ref.get("uid"):
            return False
        if pod["metadata"].get("deletionTimestamp"):
            return False
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        self._redirect(pod)
        return True

    def _redirect(self, pod: Mapping[str, Any]) -> None:
        """Tell an adopted pod where this master's dispatcher is, if it was told another address."""
        location = self.dispatcher() if self.dispatcher is not None else None
        annotations = pod["metadata"].get("annotations") or {}
        if location is None or DISPATCHER_ANNOTATION not in annotations:
            return
        if annotations[DISPATCHER_ANNOTATION] != location:
            name = pod["metadata"]["name"]
            patch = {"metadata": {"annotations": {DISPATCHER_ANNOTATION: location}}}
            self.api.patch(f"{self.pods_path}/{name}", patch)

    def pods(self) -> list[dict[str, Any]]:
        return self.informer.items()

    def _emit(self, type_: str, executor: str, data: dict[str, Any]) -> None:
        log.warning("%s %s: %s", type_, executor, data.get("reason"))
        if self.on_event is not None:
            self.on_event(type_, executor, data)

    def close(self) -> None:
        self.informer.stop()


def _argument(command: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` in an argv, or None."""
    args = list(command)
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def _created(meta: Mapping[str, Any]) -> float:
    return parse_time(meta.get("creationTimestamp"))


def _allotment(pod: Mapping[str, Any]) -> Allotment | None:
    from airflow_provider_primus.contracts.job import parse_cpu, parse_memory

    for c in pod.get("spec", {}).get("containers", []):
        if c.get("name") == CONTAINER:
            limits = (c.get("resources") or {}).get("limits") or {}
            with contextlib.suppress(KeyError, ValueError):
                return Allotment(parse_cpu(limits["cpu"]), parse_memory(limits["memory"]))
    return None


def _termination(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            code = term.get("exitCode")
            reason = term.get("reason") or "exited"
            if reason in ("Completed", "Error"):
                reason = "exited"
            elif reason == "OOMKilled":
                reason = "memory limit: OOMKilled"
            return (int(code) if code is not None else None), reason
    return None, "exited"


def storage_secret_env(data: PrimusData, training: PrimusTraining | None = None) -> list[dict[str, Any]]:
    """The ``secretKeyRef`` env entries for every Secret the data document's sources and the
    training document's checkpoint and publish directories name for their object-store credentials
    (``storage.credentials.secret``), once per variable."""
    entries: dict[str, dict[str, Any]] = {}
    storages = [getattr(source, "storage", None) for source in data.spec.sources]
    if training is not None:
        storages += [training.spec.checkpoint.storage, training.spec.publish.storage]
    for storage in storages:
        secret = storage.credentials.secret if storage and storage.credentials else None
        if secret is None:
            continue
        names = secret.env_names()
        keys = (secret.access_key_id_key, secret.secret_access_key_key, secret.session_token_key)
        for name, key in zip(names, keys, strict=True):
            if key is not None:
                ref = {"name": secret.name, "key": key}
                entries[name] = {"name": name, "valueFrom": {"secretKeyRef": ref}}
    return list(entries.values())
