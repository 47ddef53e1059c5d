"""The job store on Kubernetes: a job is a PrimusJob custom resource, its events are core Events.

Same interface as ``SqliteJobStore`` (``JobStore``), so the master, the CLI and the Airflow hook do
not know which one they talk to. The mapping:

* ``spec`` — the job document (apiVersion, kind, metadata.name, spec) as the custom resource holds it;
* ``desired`` — ``spec.desired`` of the resource (the ``scale`` subresource writes ``scale.data``);
* ``status`` — the status subresource, written by the master only;
* ``version`` — ``metadata.resourceVersion``; every write names the version it read and the apiserver
  answers 409 on a mismatch (etcd's revisions are integers, so they are compared as such);
* ``watch`` — with ``informer=True`` (the master) the object is listed once and then watched; reads
  come from that cache and cost no request, a watch that ends resumes from the last version seen.

Errors the apiserver finds in a submitted resource come back as ``SpecError`` with the field paths the
local validation uses (``spec.roles.data.replicas.max``), so a user sees the same message either way.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_provider_primus.contracts.crd import API_VERSION, KIND, PLURAL
from airflow_provider_primus.contracts.errors import SpecError, SpecIssue
from airflow_provider_primus.credentials import token_secret
from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, parse_time, resource_path
from airflow_provider_primus.kubernetes.informer import Informer
from airflow_provider_primus.kubernetes.manifests import (
    LABEL_JOB,
    documents_configmap,
    network_policies,
    owner_reference,
)
from airflow_provider_primus.master.jobs import job_documents
from airflow_provider_primus.master.store import Conflict, Event, JobExists, JobNotFound, JobRecord
from airflow_provider_primus.tls import JobCa, tls_secret

EVENT_SOURCE = "primus-master"
_DATA = "primus.dev/data"
_EXECUTOR = "primus.dev/executor"
_SEQ = "primus.dev/seq"
_UNKNOWN = re.compile(r'unknown field "([^"]+)"')


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def spec_errors(exc: KubeError) -> SpecError:
    """The apiserver's field errors in the local validator's terms."""
    issues = []
    for field, message in exc.causes:
        if "validation rules were not checked" in message:
            continue  # a note that the CEL rules waited for the schema errors, not an error itself
        path = field.removeprefix(".").removeprefix("<nil>").strip(".") or "spec"
        # "Invalid value: \"object\": must be at least min" → "must be at least min"
        text = re.sub(r'^(Invalid value|Unsupported value|Required value)(: "[^"]*"|: [^:]+)?: ', "", message)
        for unknown in _UNKNOWN.findall(message):
            path, text = unknown.removeprefix("."), "unknown field"
        issues.append(SpecIssue(path, text))
    for unknown in _UNKNOWN.findall(str(exc)):
        if not any(i.path == unknown for i in issues):
            issues.append(SpecIssue(unknown.removeprefix("."), "unknown field"))
    return SpecError(issues or [SpecIssue("spec", str(exc))])


def as_resource(document: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A stored job document as a custom resource body (quantities already normalised by the models:
    cpu as cores, which Kubernetes writes as a quantity string)."""
    body: dict[str, Any] = json.loads(json.dumps(document))
    body["apiVersion"], body["kind"] = API_VERSION, KIND
    meta = {"name": body.get("metadata", {}).get("name")}
    if labels:
        meta["labels"] = dict(labels)
    body["metadata"] = meta
    _quantities_as_strings(body.get("spec", {}))
    return body


def _quantities_as_strings(node: Any, key: str = "") -> None:
    """``cpu: 0.5`` is a float locally, ``"500m"`` to Kubernetes (int-or-string)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if (
                k in ("cpu", "min", "max")
                and isinstance(v, float)
                and key in ("resources", "cpu", "max_step")
            ):
                node[k] = f"{round(v * 1000)}m" if v != int(v) else int(v)
            else:
                _quantities_as_strings(v, k)


class KubeJobStore:
    kind = "kubernetes"  # the backend its jobs run on

    def __init__(self, api: KubeApi, namespace: str, *, informer: bool = False) -> None:
        self.api = api
        self.namespace = namespace
        self.collection = resource_path(API_VERSION, PLURAL, namespace)
        self._informers: dict[str, Informer] = {}
        self._use_informer = informer
        self._raw: dict[str, dict[str, Any]] = {}
        # name → the resourceVersion a write conflicted at: the cache is behind until it passes it.
        self._stale: dict[str, int] = {}
        self._lock = threading.Lock()
        self._last_seq = 0

    # --- objects ------------------------------------------------------------------------------------

    def _path(self, name: str, sub: str = "") -> str:
        return f"{self.collection}/{name}{'/' + sub if sub else ''}"

    def _record(self, obj: Mapping[str, Any]) -> JobRecord:
        meta = obj.get("metadata") or {}
        spec = dict(obj.get("spec") or {})
        desired = dict(spec.pop("desired", None) or {})
        document = {
            "apiVersion": obj.get("apiVersion", API_VERSION),
            "kind": obj.get("kind", KIND),
            "metadata": {"name": meta.get("name")},
            "spec": spec,
        }
        with self._lock:
            self._raw[str(meta.get("name"))] = dict(obj)
        return JobRecord(
            name=str(meta.get("name")),
            version=int(meta.get("resourceVersion") or 0),
            spec=document,
            desired=desired,
            status=dict(obj.get("status") or {}),
            labels=dict(meta.get("labels") or {}),
            created=parse_time(meta.get("creationTimestamp")),
        )

    def create(
        self, name: str, spec: Mapping[str, Any], labels: Mapping[str, str] | None = None
    ) -> JobRecord:
        body = as_resource({**spec, "metadata": {"name": name}}, labels)
        # The scale subresource reads spec.desired.scale.data: it starts at the initial count.
        replicas = ((body["spec"].get("roles") or {}).get("data") or {}).get("replicas") or {}
        initial = replicas.get("initial", replicas.get("min", 1))
        if isinstance(initial, int) and not isinstance(initial, bool) and initial >= 0:
            body["spec"]["desired"] = {"scale": {"data": initial}}  # else the apiserver refuses the job
        try:
            obj = self.api.create(self.collection, body, fieldValidation="Strict")
        except KubeError as exc:
            if exc.status == 409:
                raise JobExists(
                    f"a job named {name!r} already exists in namespace {self.namespace}"
                ) from None
            if exc.status in (400, 422):
                raise spec_errors(exc) from None
            raise
        return self._record(obj)

    def raw(self, name: str) -> dict[str, Any]:
        """The custom resource as last read (owner references need its uid)."""
        with self._lock:
            obj = self._raw.get(name)
        if obj is None:
            self.get(name)
            with self._lock:
                obj = self._raw[name]
        return obj

    def get(self, name: str) -> JobRecord:
        informer = self._informer(name)
        if informer is not None:
            obj = informer.get(name)
            with self._lock:
                stale = self._stale.get(name, 0)
            if obj is not None and int(obj["metadata"]["resourceVersion"]) > stale:
                return self._record(obj)
            if obj is None and not stale:
                raise JobNotFound(name)
            # A write just conflicted and the watch has not caught up yet: read through once.
        try:
            return self._record(self.api.get(self._path(name)))
        except KubeError as exc:
            if exc.status == 404:
                raise JobNotFound(name) from None
            raise

    def _informer(self, name: str) -> Informer | None:
        if not self._use_informer:
            return None
        with self._lock:
            informer = self._informers.get(name)
        if informer is None:
            informer = Informer(self.api, self.collection, field_selector=f"metadata.name={name}").start()
            with self._lock:
                self._informers[name] = informer
        return informer

    def find(self, labels: Mapping[str, str] | None = None) -> list[JobRecord]:
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items()) or None
        listing = self.api.get(self.collection, labelSelector=selector)
        return sorted((self._record(o) for o in listing.get("items", [])), key=lambda r: r.name)

    def update(
        self,
        name: str,
        version: int,
        *,
        status: Mapping[str, Any] | None = None,
        desired: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        """Replace ``desired`` (the resource) and/or ``status`` (its subresource) at ``version``."""
        with self._lock:
            obj = self._raw.get(name)
        if obj is None or int(obj["metadata"]["resourceVersion"]) != version:
            current = self._fetch(name)
            if int(current["metadata"]["resourceVersion"]) != version:
                raise Conflict(
                    f"job {name!r} is at version {current['metadata']['resourceVersion']}, not {version}"
                )
            obj = current
        obj = json.loads(json.dumps(obj))
        if desired is not None:
            obj.setdefault("spec", {})["desired"] = dict(desired)
            obj = self._put(name, obj, "")
        if status is not None:
            obj["status"] = json.loads(json.dumps(status))
            obj = self._put(name, obj, "status")
        return self._record(obj)

    def _fetch(self, name: str) -> dict[str, Any]:
        try:
            obj = self.api.get(self._path(name))
        except KubeError as exc:
            if exc.status == 404:
                raise JobNotFound(name) from None
            raise
        self._record(obj)
        return obj

    def _put(self, name: str, obj: dict[str, Any], sub: str) -> dict[str, Any]:
        try:
            return self.api.replace(self._path(name, sub), obj)
        except KubeError as exc:
            if exc.status == 409:
                with self._lock:
                    self._raw.pop(name, None)
                    self._stale[name] = int(obj["metadata"]["resourceVersion"])
                raise Conflict(
                    f"job {name!r} changed since version {obj['metadata']['resourceVersion']}"
                ) from None
            if exc.status == 404:
                raise JobNotFound(name) from None
            raise

    def delete(self, name: str) -> None:
        """Delete the resource; its executor pods and secret follow by owner reference (garbage
        collection), and the master, watching, stops them itself too."""
        with contextlib.suppress(KubeError):
            self.api.delete(self._path(name), {"propagationPolicy": "Background"})
        with self._lock:
            self._raw.pop(name, None)

    def watch(self, name: str, since_version: int, timeout_s: float) -> JobRecord | None:
        informer = self._informer(name)
        if informer is not None:

            def newer(objects: dict[str, dict[str, Any]]) -> bool:
                obj = objects.get(name)
                return obj is None or int(obj["metadata"]["resourceVersion"]) > since_version

            if not informer.wait_for(newer, timeout_s):
                return None
            obj = informer.get(name)
            return self._record(obj) if obj else None
        deadline = time.monotonic() + timeout_s
        record = self.get(name)
        if record.version > since_version:
            return record
        try:
            for event in self.api.watch(
                self.collection,
                resource_version=str(record.version),
                timeout_s=max(1, int(timeout_s)),
                fieldSelector=f"metadata.name={name}",
            ):
                obj = event.get("object") or {}
                if event.get("type") in ("ADDED", "MODIFIED"):
                    return self._record(obj)
                if event.get("type") in ("DELETED", "ERROR") or time.monotonic() > deadline:
                    break
        except KubeError:
            pass
        record = self.get(name)
        return record if record.version > since_version else None

    def close(self) -> None:
        with self._lock:
            informers, self._informers = list(self._informers.values()), {}
        for informer in informers:
            informer.stop()

    def provision(self, name: str, token: str, stored: Mapping[str, Any], *, ca: JobCa | None = None) -> None:
        """The job's token Secret, TLS Secret (its CA, when it serves TLS), documents ConfigMap and
        NetworkPolicies (only its own pods reach its executors: ``manifests.network_policies``),
        owned by its resource (idempotent: a resubmission replaces them). Pods read the token
        through ``secretKeyRef`` and mount the CA; neither appears in a pod spec, a log or XCom."""
        owner = owner_reference(self.raw(name))
        labels = {LABEL_JOB: name}
        objects = [("secrets", token_secret(name, token, labels=labels, owner=owner))]
        if ca is not None:
            objects.append(("secrets", tls_secret(name, ca, labels=labels, owner=owner)))
        objects.append(("configmaps", documents_configmap(name, job_documents(stored), owner)))
        spec = stored.get("spec") or {}
        kube = (spec.get("backend") or {}).get("kubernetes") or {}
        for policy in network_policies(
            name,
            self.namespace,
            owner,
            control_port=int((spec.get("control") or {}).get("port") or 0),
            control_from=list(kube.get("control_from") or []),
        ):
            objects.append(("networkpolicies", policy))
        for plural, body in objects:
            group = "networking.k8s.io/v1" if plural == "networkpolicies" else "v1"
            path = resource_path(group, plural, self.namespace)
            try:
                self.api.create(path, body)
            except KubeError as exc:
                if exc.status != 409:
                    raise
                self.api.replace(f"{path}/{body['metadata']['name']}", body)

    # --- events -------------------------------------------------------------------------------------

    def _next_seq(self) -> int:
        """Microseconds since the epoch, strictly increasing in this process: events from the master
        and the submitter sort by it and ``after`` pages through them."""
        with self._lock:
            seq = max(int(time.time() * 1e6), self._last_seq + 1)
            self._last_seq = seq
        return seq

    def add_event(
        self,
        job: str,
        type: str,
        message: str,
        executor: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Event:
        t = time.time()
        seq = self._next_seq()
        try:
            uid = self.raw(job)["metadata"].get("uid")
        except (JobNotFound, KubeError):
            uid = None
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{job}.{seq:x}",
                "labels": {LABEL_JOB: job},
                "annotations": {
                    _SEQ: str(seq),
                    _DATA: json.dumps(dict(data or {})),
                    **({_EXECUTOR: executor} if executor else {}),
                },
            },
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": job,
                "namespace": self.namespace,
                **({"uid": uid} if uid else {}),
            },
            "reason": type,
            "message": message[:1024],
            "type": "Warning" if type in _WARNINGS else "Normal",
            "source": {"component": EVENT_SOURCE},
            "firstTimestamp": _rfc3339(t),
            "lastTimestamp": _rfc3339(t),
            "eventTime": _micro(t),
            "reportingComponent": EVENT_SOURCE,
            "reportingInstance": EVENT_SOURCE,
            "action": type,
            "count": 1,
        }
        self.api.create(resource_path("v1", "events", self.namespace), body)
        return Event(seq, t, job, type, message, executor, dict(data or {}))

    def events(self, job: str, after: int = 0, limit: int = 1000) -> list[Event]:
        listing = self.api.get(
            resource_path("v1", "events", self.namespace), labelSelector=f"{LABEL_JOB}={job}"
        )
        out = []
        for e in listing.get("items", []):
            ann = (e.get("metadata") or {}).get("annotations") or {}
            seq = int(ann.get(_SEQ, 0))
            if seq <= after:
                continue
            t = seq / 1e6
            out.append(
                Event(
                    seq,
                    t,
                    job,
                    str(e.get("reason")),
                    str(e.get("message")),
                    ann.get(_EXECUTOR),
                    json.loads(ann.get(_DATA, "{}")),
                )
            )
        out.sort(key=lambda e: e.seq)
        return out[:limit]


_WARNINGS = {
    "Failed",
    "ExecutorFailed",
    "ExecutorHung",
    "ExecutorLost",
    "ExecutorAbandoned",
    "ReconcileError",
    "ResizeRefused",
    "ScaleRefused",
    "WindowRefused",
    "PartitionMissing",
    "EventTimeImplausible",
}
