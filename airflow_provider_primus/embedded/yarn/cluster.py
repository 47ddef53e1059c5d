"""Hadoop's own mini cluster (``MiniYARNCluster`` + ``MiniDFSCluster``) as a child JVM on loopback.

The launcher is ours (``java/.../MiniCluster.java``, built by ``build.py``), the cluster is Hadoop's:
a ResourceManager with the CapacityScheduler, NodeManagers that run real containers, and an HDFS
NameNode + DataNode with WebHDFS. The cluster picks its own free ports and writes the configuration
a client needs (``conf/``: core-site, hdfs-site, yarn-site) and then ``cluster.json`` (renamed into
place: seeing it means started). Lifecycle, as for the embedded Kafka broker:

* an *attached* cluster (tests) dies with its owner: SIGTERM when the launching thread dies
  (PR_SET_PDEATHSIG), and the JVM also exits when its stdin (a pipe from us) closes;
* a *detached* one (``primus yarn up``) outlives the CLI and is found again through ``cluster.json``;
* stop sends SIGTERM to the JVM's process group: the NodeManagers stop their containers, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from airflow_provider_primus.embedded.yarn.build import (
    MINI_CLUSTER_CLASS,
    MiniClusterBuild,
    ensure_mini_cluster_build,
)
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.process import pid_alive, stop_process_group, tied_to_launcher
from airflow_provider_primus.yarn.build import YarnToolchainMissing

__all__ = ["MiniYarnCluster", "YarnClusterError", "running", "start", "stop"]

FACTS = "cluster.json"
LOG = "mini-cluster.log"
# Marks mini-cluster JVMs started by this package; tests and scripts find stray ones by it.
INSTANCE_PROPERTY = "primus.embedded.yarn"


class YarnClusterError(PrimusError):
    """The mini cluster could not start or stop; the message carries the tail of its log."""


@dataclass
class MiniYarnCluster:
    """A running mini cluster: where its ResourceManager, NodeManagers and HDFS answer."""

    workdir: Path
    facts: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    _stdin: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        return int(self.facts["pid"])

    @property
    def conf_dir(self) -> Path:
        """HADOOP_CONF_DIR for clients of this cluster (core-site, hdfs-site, yarn-site)."""
        return Path(self.facts["conf_dir"])

    @property
    def rm_url(self) -> str:
        return f"http://{self.facts['rm_http']}"

    @property
    def webhdfs_url(self) -> str | None:
        return f"http://{self.facts['webhdfs']}" if self.facts.get("webhdfs") else None

    @property
    def fs_default(self) -> str:
        return str(self.facts["fs_default"])

    @property
    def kerberos(self) -> dict[str, str] | None:
        """A Kerberized cluster's realm, KDC, client ``krb5.conf``, client principal and keytab."""
        found = self.facts.get("kerberos")
        return dict(found) if found else None

    @property
    def node_managers(self) -> list[dict[str, str]]:
        return list(self.facts.get("node_managers") or [])

    def describe(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "conf_dir": str(self.conf_dir),
            "resource_manager": self.rm_url,
            "hdfs": self.fs_default,
            "webhdfs": self.webhdfs_url,
            "node_managers": self.node_managers,
            "workdir": str(self.workdir),
            **({"kerberos": self.kerberos} if self.kerberos else {}),
        }

    def stop(self, grace_s: float = 30.0) -> None:
        if self._stdin is not None:
            with contextlib.suppress(OSError):
                self._stdin.close()
        if pid_alive(self.pid):
            stop_process_group(self.pid, child=self.proc, grace_s=grace_s)
        (self.workdir / FACTS).unlink(missing_ok=True)

    def __enter__(self) -> MiniYarnCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _java() -> tuple[str, dict[str, str]]:
    """The java binary and an environment with JAVA_HOME set: the NodeManagers hand it to the
    containers they start (``{{JAVA_HOME}}/bin/java`` in an ApplicationMaster's command)."""
    env = dict(os.environ)
    home = env.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise YarnToolchainMissing(
            "the YARN mini cluster needs a JDK (>= 11); fix: apt-get install openjdk-17-jdk-headless"
        )
    if not home:
        env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    return java, env


def _log_tail(workdir: Path, lines: int = 40) -> str:
    try:
        return "\n".join((workdir / LOG).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start(
    workdir: Path,
    *,
    node_managers: int = 1,
    nm_memory_mb: int = 4096,
    nm_vcores: int = 4,
    hdfs: bool = True,
    kerberos: bool = False,
    kerberos_user: str | None = None,
    detached: bool = False,
    timeout_s: float = 300.0,
    build: MiniClusterBuild | None = None,
) -> MiniYarnCluster:
    """Start a mini cluster whose state lives in ``workdir`` (wiped first: a mini cluster's HDFS and
    logs are scratch). Returns once the NodeManagers registered and HDFS is up. ``kerberos``: a
    Kerberized cluster (its own KDC; SPNEGO on every web endpoint; the client's principal and keytab
    in :attr:`MiniYarnCluster.kerberos`; ``kerberos_user`` its short name, default the OS user's)."""
    build = build or ensure_mini_cluster_build()
    java, env = _java()
    workdir = workdir.resolve()
    if workdir.exists():
        existing = running(workdir)
        if existing is not None:
            raise YarnClusterError(f"a mini cluster already runs from {workdir} (pid {existing.pid})")
        shutil.rmtree(workdir)
    (workdir / "tmp").mkdir(parents=True)
    command = [
        java,
        f"-D{INSTANCE_PROPERTY}={workdir}",
        f"-Djava.io.tmpdir={workdir / 'tmp'}",  # Jetty's scratch directories
        "-Xmx1g",
        "-XX:+UseSerialGC",
        "-cp",
        build.classpath(),
        MINI_CLUSTER_CLASS,
        "--state-dir", str(workdir),
        "--node-managers", str(node_managers),
        "--nm-memory-mb", str(nm_memory_mb),
        "--nm-vcores", str(nm_vcores),
        "--hdfs", str(hdfs).lower(),
        "--kerberos", str(kerberos).lower(),
        *(["--kerberos-user", kerberos_user] if kerberos_user else []),
        "--watch-stdin", str(not detached).lower(),
        # What an application's containers get on their classpath besides their own jars.
        "--application-classpath", os.pathsep.join([str(build.libs / "*")]),
    ]  # fmt: skip
    with open(workdir / LOG, "ab") as log:
        proc = subprocess.Popen(
            command if detached else tied_to_launcher(command),
            stdin=subprocess.DEVNULL if detached else subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=workdir,  # MiniYARNCluster keeps its NodeManagers' directories under ./target
        )
    cluster_facts = workdir / FACTS
    deadline = time.monotonic() + timeout_s
    while not cluster_facts.exists():
        if proc.poll() is not None:
            raise YarnClusterError(
                f"the YARN mini cluster exited with code {proc.returncode} while starting:\n"
                + _log_tail(workdir)
            )
        if time.monotonic() > deadline:
            stop_process_group(proc.pid, child=proc, grace_s=5)
            raise YarnClusterError(
                f"the YARN mini cluster did not start in {timeout_s:g}s:\n{_log_tail(workdir)}"
            )
        time.sleep(0.2)
    facts = json.loads(cluster_facts.read_text())
    return MiniYarnCluster(workdir, facts, proc=proc, _stdin=proc.stdin)


def running(workdir: Path) -> MiniYarnCluster | None:
    """The mini cluster started from ``workdir`` when it still runs (``primus yarn status|down``)."""
    try:
        facts = json.loads((workdir / FACTS).read_text())
    except (OSError, ValueError):
        return None
    if not pid_alive(int(facts.get("pid", 0))):
        return None
    return MiniYarnCluster(workdir.resolve(), facts)


def stop(workdir: Path) -> bool:
    """Stop the mini cluster of ``workdir``; False when none ran."""
    cluster = running(workdir)
    if cluster is None:
        return False
    cluster.stop()
    return True
