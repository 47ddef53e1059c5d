"""A job's YARN application: staged files, submission, finding it again, its ApplicationMaster.

One application per job, tagged ``primus-job-<name>`` so a restarted master (or an Airflow retry)
finds the running one instead of submitting a second. Submitting stages the ApplicationMaster's jar,
the job token (0600) and the job's documents under ``<staging>/<application id>/`` on the cluster's
default filesystem and submits through the ResourceManager's REST API with
``keep-containers-across-application-attempts``: when the ApplicationMaster dies, YARN starts a new
attempt and the executors' containers keep running for it to re-adopt. The token and the documents
reach the AM and every container as LocalResources, never on a command line. So does a TLS job's
certificate authority (``tls.py``): ``ca.crt`` and ``ca.key``, staged 0600 and localized with
APPLICATION visibility into each executor container's working directory, where the executor issues
itself a certificate for the address it serves on, as a pod does from the mounted Secret.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from airflow_provider_primus.contracts.job import YarnBackend as YarnSettings
from airflow_provider_primus.errors import PrimusError, TerminalError
from airflow_provider_primus.hadoop.config import HadoopConf, load_conf
from airflow_provider_primus.hadoop.kerberos import KerberosError, KerberosLogin, SpnegoAuth, short_name
from airflow_provider_primus.hadoop.webhdfs import WebHdfs, WebHdfsError
from airflow_provider_primus.tls import CA_FILE, CA_KEY_FILE, JobCa, verify_context
from airflow_provider_primus.yarn.am import AmClient
from airflow_provider_primus.yarn.am_cert import AM_CERT, AM_KEY
from airflow_provider_primus.yarn.build import AM_CLASS, YarnBuild, ensure_build
from airflow_provider_primus.yarn.rest import UNFINISHED, ResourceManager

log = logging.getLogger(__name__)

__all__ = [
    "APPLICATION_TYPE",
    "HDFS_TOKEN_LINK",
    "TOKEN_LINK",
    "StagedFile",
    "YarnApplicationEndedError",
    "YarnApplicationError",
    "YarnSession",
    "application_tag",
    "client_identity",
    "document_link",
    "kill_job_applications",
    "with_yarn_backend",
]

APPLICATION_TYPE = "PRIMUS"
TAG_PREFIX = "primus-job-"
TOKEN_LINK = "primus-token"
HDFS_TOKEN_LINK = "primus-hdfs-token"  # the HDFS delegation token, URL-safe encoded (Kerberos)
JAR_LINK = "primus-yarn.jar"
# What every container of the application gets from the master's environment (where the provider is).
FORWARDED_ENV = ("PYTHONPATH", "PRIMUS_HOME", "PRIMUS_CACHE_DIR")
AM_IDLE_TIMEOUT_S = 600  # the AM gives up when no master called it for this long


class YarnApplicationError(PrimusError):
    """The application could not be submitted or has ended; the message says which and why."""


class YarnApplicationEndedError(YarnApplicationError, TerminalError):
    """The application has ended (finished, failed, killed): its containers are gone and no attempt
    of its ApplicationMaster will come, so the job cannot go on in it."""


class YarnUnsupportedError(YarnApplicationError, TerminalError):
    """The cluster cannot be spoken to as configured (Kerberos without credentials or without the
    gssapi package, a user that is not the principal's): no master restart will help."""


def client_identity(conf: HadoopConf, settings: YarnSettings) -> tuple[str, httpx.Auth | None]:
    """Who the REST and WebHDFS clients are: ``user.name`` under simple authentication; on a
    Kerberized cluster the principal (SPNEGO), its login exported for this process's ``hdfs://``
    access (the planner). Raises :class:`YarnUnsupportedError` when no credentials are usable."""
    if not conf.kerberos:
        return settings.user or getpass.getuser(), None
    login = KerberosLogin(settings.principal, settings.keytab)
    try:
        user = short_name(login.principal_name())
    except KerberosError as exc:
        raise YarnUnsupportedError(f"the cluster is Kerberized and {exc}") from exc
    if settings.user and settings.user != user:
        raise YarnUnsupportedError(
            f"backend.yarn.user {settings.user!r} is not the Kerberos principal's user {user!r}: on a "
            "Kerberized cluster the application runs as the principal (impersonation is not supported)"
        )
    login.export()
    return user, SpnegoAuth(login)


def application_tag(job: str) -> str:
    return f"{TAG_PREFIX}{job}".lower()  # YARN lower-cases tags


def submission_tag(token: str) -> str:
    """Which submission of the job an application serves (a digest of its token, not the token): an
    application of an earlier job of the same name is not re-adopted, it is killed."""
    return "primus-submission-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def document_link(index: int, path: str) -> str:
    """A document's name in a container's working directory (LocalResource link names are flat)."""
    return f"document-{index}-{Path(path).name}"


def wheel_link(index: int, path: str) -> str:
    """A user's wheel's name in a container's working directory (its file name kept: zipimport and
    pip read the distribution from it)."""
    return f"wheel-{index}-{Path(path).name}"


@dataclass(frozen=True)
class StagedFile:
    link: str
    url: str
    size: int
    timestamp: int

    def am_resource(self) -> dict[str, Any]:
        return {"link": self.link, "url": self.url, "size": self.size, "timestamp": self.timestamp}

    def rest_entry(self) -> dict[str, Any]:
        value = {"resource": self.url, "type": "FILE", "visibility": "APPLICATION"}
        return {"key": self.link, "value": {**value, "size": self.size, "timestamp": self.timestamp}}


class YarnSession:
    """One job's application as its master drives it: the ResourceManager and WebHDFS clients, the
    staged files, and the client of the current ApplicationMaster attempt."""

    def __init__(
        self,
        job: str,
        token: str,
        settings: YarnSettings,
        documents: Mapping[str, str],
        *,
        build: YarnBuild | None = None,
        conf: HadoopConf | None = None,
        ca: JobCa | None = None,
    ) -> None:
        """``ca``: the job's certificate authority when it serves TLS, shipped to every executor."""
        self.job, self.settings = job, settings
        self._token = token
        self._ca = ca
        self.documents = dict(documents)  # absolute path on the master -> text
        self.conf = conf or load_conf(settings.conf_dir)
        self.user, self.auth = client_identity(self.conf, settings)
        self.rm = ResourceManager(settings.resource_manager or self.conf.rm_url, self.user, auth=self.auth)
        self.hdfs = WebHdfs(self.conf.webhdfs_url, self.user, auth=self.auth)
        self._hdfs_token: str | None = None  # obtained at submission (Kerberos)
        self.build = build
        self.app_id: str | None = None
        self.files: list[StagedFile] = []  # what every executor container localizes

    # --- staging -----------------------------------------------------------------------------------

    def staging_dir(self, app_id: str) -> str:
        base = self.settings.staging_dir or f"/user/{self.user}/.primus"
        return f"{base.rstrip('/')}/{app_id}"

    def _url(self, path: str) -> str:
        return self.conf.fs_default.rstrip("/") + path

    def _stage(self, directory: str, link: str, data: bytes, permission: str) -> StagedFile:
        path = f"{directory}/{link}"
        status = self.hdfs.create(path, data, permission=permission)
        return StagedFile(link, self._url(path), status.length, status.modification_time)

    def _executor_files(self, directory: str) -> list[tuple[str, bytes, str]]:
        files = [(TOKEN_LINK, self._token.encode(), "600")]
        if self.conf.kerberos:  # executors read hdfs:// with the application's delegation token
            files.append((HDFS_TOKEN_LINK, (self._hdfs_token or "").encode(), "600"))
        for i, (path, text) in enumerate(self.documents.items()):
            files.append((document_link(i, path), text.encode(), "600"))
        if self._ca is not None:  # a TLS job: $PRIMUS_TLS_DIR is the container's directory
            files += [(CA_FILE, self._ca.cert_pem, "600"), (CA_KEY_FILE, self._ca.key_pem, "600")]
        for i, wheel in enumerate(self.settings.wheels):  # the user's code: on the import path
            files.append((wheel_link(i, wheel), Path(wheel).read_bytes(), "600"))
        return files

    @property
    def wheel_links(self) -> list[str]:
        """The user's wheels as an executor's container has them, in import order."""
        return [wheel_link(i, w) for i, w in enumerate(self.settings.wheels)]

    def _restage_known(self, app_id: str) -> list[StagedFile]:
        """The files an earlier master staged for this application (their HDFS status is what the
        NodeManagers check a LocalResource against)."""
        directory = self.staging_dir(app_id)
        out = []
        for link, _, _ in self._executor_files(directory):
            status = self.hdfs.status(f"{directory}/{link}")
            out.append(
                StagedFile(link, self._url(f"{directory}/{link}"), status.length, status.modification_time)
            )
        return out

    # --- the application ---------------------------------------------------------------------------

    def find(self) -> dict[str, Any] | None:
        """The job's unfinished application, if one runs (the newest when there are several).
        Applications of an earlier job of the same name (another token) are killed."""
        apps = self.rm.apps(tag=application_tag(self.job), states=UNFINISHED)
        ours: list[dict[str, Any]] = []
        for app in apps:
            if app.get("applicationType") != APPLICATION_TYPE:
                continue
            if submission_tag(self._token) in str(app.get("applicationTags") or "").split(","):
                ours.append(app)
            else:
                log.warning("killing %s: it served an earlier job named %r", app["id"], self.job)
                self.rm.kill(str(app["id"]))
        return max(ours, key=lambda a: int(a.get("startedTime") or 0)) if ours else None

    def ensure_application(self) -> str:
        """Find the job's running application, or submit one."""
        found = self.find()
        if found is not None:
            self.app_id = str(found["id"])
            self.files = self._restage_known(self.app_id)
            return self.app_id
        return self.submit()

    def submit(self) -> str:
        build = self.build or ensure_build()
        new = self.rm.new_application()
        app_id = str(new["application-id"])
        directory = self.staging_dir(app_id)
        credentials = self._delegation_tokens()
        self.hdfs.mkdirs(directory, permission="700")
        jar = self._stage(directory, JAR_LINK, build.jar.read_bytes(), "644")
        self.files = [
            self._stage(directory, link, data, perm) for link, data, perm in self._executor_files(directory)
        ]
        am_files = [jar] + [f for f in self.files if f.link in (TOKEN_LINK, CA_FILE, CA_KEY_FILE)]
        am_mb = math.ceil(self.settings.am_memory / 2**20)
        heap = max(64, int(am_mb * 0.7))
        classpath = "<CPS>".join(["{{PWD}}/" + JAR_LINK, *self.conf.application_classpath])
        java = (
            f"{{{{JAVA_HOME}}}}/bin/java -Xmx{heap}m -XX:+UseSerialGC {AM_CLASS} "
            f"--token-file {TOKEN_LINK} --idle-timeout-s {AM_IDLE_TIMEOUT_S}"
        )
        if self._ca is not None:  # its API over TLS: a certificate for its host, from the job's CA
            python = self.settings.python or sys.executable
            java = (
                f"{python} -m airflow_provider_primus.yarn.am_cert "
                "1><LOG_DIR>/am-cert.stdout 2><LOG_DIR>/am-cert.stderr && "
                f"{java} --tls-cert {AM_CERT} --tls-key {AM_KEY}"
            )
        command = f"{java} 1><LOG_DIR>/am.stdout 2><LOG_DIR>/am.stderr"
        environment = [{"key": "CLASSPATH", "value": classpath}] + [
            {"key": k, "value": os.environ[k]} for k in FORWARDED_ENV if k in os.environ
        ]
        body = {
            "application-id": app_id,
            "application-name": f"primus {self.job}",
            "application-type": APPLICATION_TYPE,
            "queue": self.settings.queue,
            "am-container-spec": {
                "local-resources": {"entry": [f.rest_entry() for f in am_files]},
                "environment": {"entry": environment},
                "commands": {"command": command},
                **credentials,
            },
            "resource": {"memory": am_mb, "vCores": 1},
            "max-app-attempts": self.settings.max_attempts,
            "keep-containers-across-application-attempts": True,
            "application-tags": {"tag": [application_tag(self.job), submission_tag(self._token)]},
            "unmanaged-AM": False,
        }
        self.rm.submit(body)
        self.app_id = app_id
        return app_id

    def _delegation_tokens(self) -> dict[str, Any]:
        """On a Kerberized cluster, the application's credentials: an HDFS delegation token the
        ResourceManager renews while the application runs (and cancels after). The NodeManagers
        localize the staged files with it, the ApplicationMaster hands it to every container, and
        the executors read ``hdfs://`` with it: nothing in the cluster needs the user's keytab."""
        if not self.conf.kerberos:
            return {}
        renewer = self.conf.rm_principal
        if not renewer:
            raise YarnUnsupportedError(
                "the cluster is Kerberized but its yarn-site.xml does not name "
                "yarn.resourcemanager.principal (the renewer of the application's HDFS token)"
            )
        service = self.conf.token_service()
        self._hdfs_token = self.hdfs.delegation_token(renewer, service)
        return {"credentials": {"tokens": {"entry": [{"key": service, "value": self._hdfs_token}]}}}

    def wait_am(self, timeout_s: float = 180.0) -> tuple[AmClient, str]:
        """The newest attempt's ApplicationMaster once it registered and answers; raises when the
        application ends first."""
        assert self.app_id is not None
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.rm.app(self.app_id)
            if last.get("state") in ("FINISHED", "FAILED", "KILLED"):
                raise YarnApplicationEndedError(
                    f"YARN application {self.app_id} of job {self.job!r} ended ({last.get('state')}, "
                    f"{last.get('finalStatus')}): {last.get('diagnostics') or 'no diagnostics'}"
                )
            address = last.get("amRPCAddress")
            attempt = self._current_attempt()
            if last.get("state") == "RUNNING" and address and attempt:
                client = self.am_client(address)
                try:
                    if client.status().get("attempt") == attempt:
                        return client, attempt
                except Exception:
                    pass  # the new attempt registers, its predecessor's address is still listed
                client.close()
            time.sleep(0.25)
        raise YarnApplicationError(
            f"the ApplicationMaster of {self.app_id} did not register in {timeout_s:g}s "
            f"(state {last.get('state')}, {last.get('diagnostics') or 'no diagnostics'})"
        )

    def am_client(self, address: str) -> AmClient:
        """A client of the ApplicationMaster at ``host:port``: HTTPS verified against the job's CA
        on a TLS job (the AM serves the certificate it issued itself for its host)."""
        if self._ca is None:
            return AmClient(f"http://{address}", self._token)
        return AmClient(f"https://{address}", self._token, verify=verify_context(self._ca.cert_pem))

    def _current_attempt(self) -> str | None:
        assert self.app_id is not None
        attempts = self.rm.attempts(self.app_id)
        if not attempts:
            return None
        newest = max(attempts, key=lambda a: int(a.get("id") or 0))
        return str(newest.get("appAttemptId") or "") or None

    def remove_staged(self) -> None:
        """Delete the application's staged files (the ended application needs them no more)."""
        if self.app_id is None:
            return
        try:
            self.hdfs.delete(self.staging_dir(self.app_id))
        except WebHdfsError as exc:
            log.warning("could not remove %s: %s", self.staging_dir(self.app_id), exc)

    def kill(self) -> None:
        if self.app_id is not None:
            self.rm.kill(self.app_id)

    def close(self) -> None:
        self.rm.close()
        self.hdfs.close()


def with_yarn_backend(document: Mapping[str, Any], connection: Mapping[str, Any]) -> dict[str, Any]:
    """The job document with ``backend.type: yarn``, its ``backend.yarn`` filled from an Airflow
    connection's settings where the document is silent (the document's own word wins)."""
    spec = dict(document.get("spec") or {})
    backend = dict(spec.get("backend") or {})
    backend["yarn"] = {**dict(connection), **dict(backend.get("yarn") or {})}
    backend["type"] = "yarn"
    return {**document, "spec": {**spec, "backend": backend}}


def kill_job_applications(job: str, settings: Mapping[str, Any]) -> list[str]:
    """Kill every unfinished application of ``job`` (by its tag); returns their ids."""
    yarn = YarnSettings.model_validate(dict(settings))
    conf = load_conf(yarn.conf_dir)
    user, auth = client_identity(conf, yarn)
    rm = ResourceManager(yarn.resource_manager or conf.rm_url, user, auth=auth)
    try:
        killed = []
        for app in rm.apps(tag=application_tag(job), states=UNFINISHED):
            if app.get("applicationType") == APPLICATION_TYPE:
                rm.kill(str(app["id"]))
                killed.append(str(app["id"]))
        return killed
    finally:
        rm.close()
