"""``primus cluster up | status | down``: a real single-node Kubernetes on this machine.

The embedded control plane (kube-apiserver, etcd, kube-scheduler) plus a real node (kubelet,
containerd + runc, a CNI bridge, kube-controller-manager), for trying the Kubernetes backend on one
machine the way people use kind or minikube. Needs root, writable cgroups and Debian's containerd,
runc and containernetworking-plugins; the Kubernetes binaries are built from source once (Go).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import StopRequested

NOT_RUNNING = 3


def default_workdir() -> Path:
    return primus_home() / "cluster"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cluster",
        help="run a real single-node Kubernetes cluster on this machine",
        description="The embedded control plane plus a real kubelet + containerd node (root only).",
    )
    csub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--workdir",
            type=Path,
            default=None,
            help="cluster state and logs (default: $PRIMUS_HOME/cluster)",
        )

    up = csub.add_parser(
        "up",
        help="start the cluster (detached unless --foreground) and print its kubeconfig path",
        description="Build what is missing (once), start the control plane and the node, wait until "
        "the node is Ready and print the state as JSON: `kubeconfig` is the admin kubeconfig.",
    )
    common(up)
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops the cluster")
    up.add_argument("--pod-cidr", default="10.88.0.1/16", help="the bridge's address and the pods' range")
    up.add_argument("--bridge", default="primus0", help="the pods' bridge device (created and removed)")
    up.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait, builds included")
    up.set_defaults(handler=run_up)

    status = csub.add_parser(
        "status",
        help="print the cluster's state; exit 3 when it is not running",
        description="Print the running cluster's state as JSON with `node_ready` (exit 0) or exit 3.",
    )
    common(status)
    status.set_defaults(handler=run_status)

    down = csub.add_parser(
        "down",
        help="stop the cluster and clean the machine",
        description="Stop the cluster (pods first), then remove its cgroups, mounts and bridge; exit 1 "
        "if anything is left behind.",
    )
    common(down)
    down.set_defaults(handler=run_down)


def run_up(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.kube import local
    from airflow_provider_primus.embedded.kube.node import NodeConfig

    workdir = args.workdir or default_workdir()
    try:
        ipaddress.ip_interface(args.pod_cidr)
    except ValueError as exc:
        print(f"error: --pod-cidr: {exc}", file=sys.stderr)
        return 2
    if not args.foreground:
        existing = local.running_state(workdir)
        if existing is not None:
            print(existing.to_json())
            return 0
        try:
            state = local.start_detached(
                workdir,
                timeout_s=args.timeout,
                extra_args=["--pod-cidr", args.pod_cidr, "--bridge", args.bridge],
            )
        except Exception as exc:  # the supervisor's log tail is the message
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(state.to_json())
        return 0
    cluster = local.LocalCluster(
        workdir, node_config=NodeConfig(bridge=args.bridge, gateway_cidr=args.pod_cidr)
    )
    stop = StopRequested()  # before start: a SIGTERM during start-up still tears down
    try:
        state = cluster.start(timeout_s=min(args.timeout, 300.0))
    except Exception as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(state.to_json(), flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        cluster.stop()
    return 0


def run_status(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.kube import local
    from airflow_provider_primus.kubernetes.client import NO_RETRY, KubeApi, KubeError, api_client_from

    state = local.running_state(args.workdir or default_workdir())
    if state is None:
        print("not running")
        return NOT_RUNNING
    ready = False
    try:
        with api_client_from(kubeconfig=state.kubeconfig) as client:
            node = KubeApi(client, timeout_s=5.0, retry=NO_RETRY).get(f"/api/v1/nodes/{state.node}")
        conditions = node.get("status", {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    except (KubeError, OSError) as exc:
        print(f"warning: the API server did not answer: {exc}", file=sys.stderr)
    print(json.dumps({**json.loads(state.to_json()), "node_ready": ready}))
    return 0


def run_down(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.kube import local

    outcome, left = local.stop_detached(args.workdir or default_workdir())
    print(outcome)
    if left:
        print("left on the machine: " + "; ".join(left), file=sys.stderr)
        return 1
    return 0
