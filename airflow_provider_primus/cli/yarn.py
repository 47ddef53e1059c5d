"""``primus yarn build | up | down | status``: Hadoop's YARN mini cluster to try the YARN backend on."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import StopRequested

NOT_RUNNING = 3


def default_workdir() -> Path:
    return primus_home() / "yarn"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "yarn",
        help="run Hadoop's YARN mini cluster (ResourceManager, NodeManagers, HDFS) on this machine",
        description="A real YARN cluster on 127.0.0.1 (Hadoop's MiniYARNCluster and MiniDFSCluster), "
        "from jars Maven resolves once into the cache; jobs with backend.type yarn run on it.",
    )
    ysub = parser.add_subparsers(dest="yarn_command", metavar="ACTION", required=True)

    def workdir(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--workdir", type=Path, default=None, help="cluster state (default: $PRIMUS_HOME/yarn)"
        )

    build = ysub.add_parser(
        "build",
        help="resolve Hadoop's jars; build the ApplicationMaster and the mini cluster's launcher",
        description="Build once with Maven what `up` and the YARN backend need; prints the paths.",
    )
    build.set_defaults(handler=run_build)

    up = ysub.add_parser(
        "up",
        help="start the mini cluster (detached unless --foreground)",
        description="Start the mini cluster and print its addresses as JSON; point HADOOP_CONF_DIR "
        "at its conf_dir. Its HDFS is scratch: every `up` starts empty.",
    )
    workdir(up)
    up.add_argument("--node-managers", type=int, default=1)
    up.add_argument("--nm-memory-mb", type=int, default=4096, help="memory each NodeManager offers")
    up.add_argument("--nm-vcores", type=int, default=4, help="vcores each NodeManager offers")
    up.add_argument("--no-hdfs", action="store_true", help="YARN only (no NameNode/DataNode)")
    up.add_argument(
        "--kerberos",
        action="store_true",
        help="a Kerberized cluster with its own KDC (MiniKdc); prints the client's krb5.conf, "
        "principal and keytab to put in KRB5_CONFIG and backend.yarn.principal/keytab",
    )
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops the cluster")
    up.set_defaults(handler=run_up)

    down = ysub.add_parser("down", help="stop the mini cluster", description="Stop the detached cluster.")
    workdir(down)
    down.set_defaults(handler=run_down)

    status = ysub.add_parser(
        "status",
        help="print the cluster's addresses; exit 3 when it is not running",
        description="Print the running cluster's addresses as JSON (exit 0) or exit 3.",
    )
    workdir(status)
    status.set_defaults(handler=run_status)


def run_build(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.yarn.build import ensure_mini_cluster_build
    from airflow_provider_primus.yarn.build import YarnBuildError

    try:
        build = ensure_mini_cluster_build()
    except YarnBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"jar": str(build.am_jar), "libs": str(build.libs), "mini_cluster_jar": str(build.jar)}))
    return 0


def run_up(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.yarn import YarnClusterError, running, start
    from airflow_provider_primus.yarn.build import YarnBuildError

    workdir = args.workdir or default_workdir()
    existing = running(workdir)
    if existing is not None:
        print(json.dumps(existing.describe()))
        return 0
    try:
        cluster = start(
            workdir,
            node_managers=args.node_managers,
            nm_memory_mb=args.nm_memory_mb,
            nm_vcores=args.nm_vcores,
            hdfs=not args.no_hdfs,
            kerberos=args.kerberos,
            detached=not args.foreground,
        )
    except (YarnClusterError, YarnBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(cluster.describe()), flush=True)
    if not args.foreground:
        return 0
    stop = StopRequested()
    while not stop.wait(1.0):
        if cluster.proc is not None and cluster.proc.poll() is not None:
            print("error: the mini cluster exited", file=sys.stderr)
            return 1
    cluster.stop()
    return 0


def run_down(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.yarn import stop

    print("stopped" if stop(args.workdir or default_workdir()) else "not running")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.yarn import running

    cluster = running(args.workdir or default_workdir())
    if cluster is None:
        print("not running")
        return NOT_RUNNING
    print(json.dumps(cluster.describe()))
    return 0
