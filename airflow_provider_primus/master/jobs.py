"""Submitting a job: validate every document it references, store it, give it a token and a home.

A job's files live under ``PRIMUS_HOME/jobs/<name>/``: the token (mode 0600, read by the CLI and the
Airflow hook, never logged), the job's TLS certificate authority when it serves TLS (``tls/``,
0600), the master's log, one log and allotment file per executor, and the trainer's work directory
(checkpoints, published model) that survives restarts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_primus.contracts.data import is_history
from airflow_provider_primus.contracts.errors import SpecError, SpecIssue
from airflow_provider_primus.contracts.job import PrimusJob, validate_job_spec
from airflow_provider_primus.contracts.loader import load_data_spec, load_training_spec, read_document
from airflow_provider_primus.contracts.training import check_against, default_training
from airflow_provider_primus.credentials import new_token, read_token_file, write_token_file
from airflow_provider_primus.master.store import JobRecord, JobStore, SqliteJobStore
from airflow_provider_primus.master.user_code import executor_python, user_model_issues, user_transform_issues
from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import primus_command
from airflow_provider_primus.tls import CA_FILE, JobCa


@dataclass(frozen=True)
class JobPaths:
    root: Path

    @property
    def token(self) -> Path:
        return self.root / "token"

    @property
    def tls(self) -> Path:
        """The job's CA (``tls.py``): key and certificate 0600, in a folder only the owner opens."""
        return self.root / "tls"

    @property
    def master_log(self) -> Path:
        return self.root / "master.log"

    @property
    def executors(self) -> Path:
        return self.root / "executors"

    @property
    def workdir(self) -> Path:
        return self.root / "train"


def job_paths(name: str, home: Path | None = None) -> JobPaths:
    return JobPaths((home or primus_home()) / "jobs" / name)


def read_token(name: str, home: Path | None = None) -> str:
    return read_token_file(job_paths(name, home).token)


def read_job_ca(name: str, home: Path | None = None) -> bytes | None:
    """The CA certificate a client of the job verifies its servers with; None for a job without TLS
    (or one submitted on another machine: a Kubernetes job's is in its TLS Secret)."""
    path = job_paths(name, home).tls / CA_FILE
    return path.read_bytes() if path.is_file() else None


def load_job(
    document: Mapping[str, Any], base: Path, store_kind: str = "local"
) -> tuple[PrimusJob, dict[str, Any]]:
    """Validate the job and the documents it references; returns the job and its stored form (paths
    made absolute so the master does not depend on the submitter's working directory). ``store_kind``
    is where it is being submitted: a job runs on the backend of the store it is submitted to."""
    job = validate_job_spec(document)
    spec = job.spec
    data_path = (base / spec.data).resolve()
    training_path = (base / spec.training).resolve() if spec.training else None
    issues: list[SpecIssue] = []

    def referenced(field: str, exc: SpecError) -> SpecError:
        return SpecError(SpecIssue(field, f"{i.path}: {i.message}") for i in exc.issues)

    try:
        data = load_data_spec(data_path)
    except SpecError as exc:
        raise referenced("spec.data", exc) from None
    try:
        training = (
            load_training_spec(training_path) if training_path else default_training(job.metadata.name, data)
        )
        check_against(training, data)  # its issues are the training document's to fix
    except SpecError as exc:
        raise referenced("spec.training", exc) from None
    executors, unusable = executor_python(job, base)
    issues.extend(unusable)
    if not unusable:
        in_image = spec.backend.type == "kubernetes"
        issues.extend(user_model_issues(training, data, executors, in_image=in_image))
        issues.extend(user_transform_issues(data, executors, in_image=in_image))
    files = [s for s in data.spec.sources if is_history(s)]
    if spec.roles.evaluator is not None:
        issues.append(
            SpecIssue(
                "spec.roles.evaluator",
                "not supported yet (holdout "
                "evaluation runs in the trainer: training spec evaluation.holdout)",
            )
        )
    # A YARN job's master runs here, beside the local job store, and drives its application.
    if {"yarn": "local"}.get(spec.backend.type, spec.backend.type) != store_kind:
        where = "a Kubernetes cluster" if store_kind == "kubernetes" else "the local job store"
        issues.append(
            SpecIssue(
                "spec.backend.type",
                f"is {spec.backend.type!r} but the job is being submitted to {where} "
                f"(set backend.type: {store_kind!r}, or submit it to the other store)",
            )
        )
    if files and data.spec.window is None and not spec.follow:
        issues.append(SpecIssue("spec.data", "the data document needs spec.window (the historical window)"))
    if issues:
        raise SpecError(issues)
    stored = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    stored["spec"]["data"] = str(data_path)
    if training_path:
        stored["spec"]["training"] = str(training_path)
    if executors.section is not None:  # absolute: the master's cwd is not the job's
        section = stored["spec"]["backend"][executors.section]
        section[executors.key] = list(executors.paths)
        if executors.python is not None:
            section["python"] = executors.python
    return job, stored


def job_documents(stored: Mapping[str, Any]) -> dict[str, str]:
    """The documents a stored job references (absolute paths) and their text: what a backend ships to
    where the master runs (a ConfigMap, a YARN LocalResource)."""
    spec = stored["spec"]
    paths = [spec["data"], *([spec["training"]] if spec.get("training") else [])]
    return {p: Path(p).read_text() for p in paths}


def submit(
    path: Path,
    *,
    store: JobStore | None = None,
    labels: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> JobRecord:
    return submit_document(read_document(path), path.resolve().parent, store=store, labels=labels, home=home)


def submit_document(
    document: Mapping[str, Any],
    base: Path,
    *,
    name: str | None = None,
    store: JobStore | None = None,
    labels: Mapping[str, str] | None = None,
    home: Path | None = None,
    token: str | None = None,
    keep_files: bool = False,
) -> JobRecord:
    """Submit a parsed job document (paths relative to ``base``). ``name`` overrides
    ``metadata.name`` (an Airflow task names its job after itself); ``token`` is the job's token
    when the caller derives it (the Airflow hook), else a random one is made. ``keep_files`` keeps an
    earlier job's files of that name (a restarted streaming trainer resumes from its checkpoints);
    otherwise they are removed so nothing of a replaced job leaks into this one."""
    store = store or SqliteJobStore()
    if name is not None:
        document = {**document, "metadata": {**dict(document.get("metadata") or {}), "name": name}}
    job, stored = load_job(document, base, store.kind)
    name = str(stored["metadata"]["name"])
    _check_namespace(document, store)
    record = store.create(name, stored, labels)
    paths = job_paths(name, home)
    try:
        if paths.root.exists() and not keep_files:
            shutil.rmtree(paths.root)
        paths.root.mkdir(parents=True, exist_ok=True)
        token = token or new_token()
        write_token_file(paths.token, token)  # created anew, mode 0600
        ca = None
        if job.spec.tls:  # the job's own CA, made now: its servers' certificates come from it
            ca = JobCa.create(name)
            ca.write(paths.tls)
        # Kubernetes: the token and TLS Secrets, the documents ConfigMap
        store.provision(name, token, stored, ca=ca)
    except Exception:
        store.delete(name)  # no job without its token
        raise
    store.add_event(name, "Submitted", f"job {name!r} submitted")
    return record


def _check_namespace(document: Mapping[str, Any], store: JobStore) -> None:
    """A namespace the document names explicitly must be the one it is submitted to."""
    kube = ((document.get("spec") or {}).get("backend") or {}).get("kubernetes") or {}
    wanted, actual = kube.get("namespace"), getattr(store, "namespace", None)
    if wanted and actual and wanted != actual:
        raise SpecError(
            [
                SpecIssue(
                    "spec.backend.kubernetes.namespace",
                    f"is {wanted!r} but the job is being submitted to namespace {actual!r}",
                )
            ]
        )


def start_master(
    name: str,
    *,
    store_path: Path | None = None,
    home: Path | None = None,
    extra_args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start the job's master in the background (its own session, outliving this process).
    ``extra_args`` select another store (``--namespace``/``--kubeconfig``: a Kubernetes job);
    ``env`` is added to its environment, which the local backend's executors inherit (object-store
    credentials a DAG's connections resolved: never on a command line)."""
    paths = job_paths(name, home)
    paths.root.mkdir(parents=True, exist_ok=True)
    command = primus_command("master", name)
    if store_path is not None:
        command += ["--store", str(store_path)]
    command += extra_args or []
    env = {**os.environ, **(env or {}), **({"PRIMUS_HOME": str(home)} if home is not None else {})}
    with open(paths.master_log, "ab") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return proc.pid


def wait_for(store: JobStore, name: str, predicate: Any, timeout_s: float, poll_s: float = 0.1) -> JobRecord:
    """The record once ``predicate(record)`` holds; TimeoutError with the last status otherwise."""
    deadline = time.monotonic() + timeout_s
    record = store.get(name)
    while not predicate(record):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"job {name!r}: condition not met in {timeout_s}s; status {json.dumps(record.status)[:2000]}"
            )
        store.watch(name, record.version, min(poll_s * 10, max(0.0, deadline - time.monotonic())))
        record = store.get(name)
    return record
