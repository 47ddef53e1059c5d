"""``primus crd`` and ``primus k8s install | manifests | network-policy``: the cluster side of the
Kubernetes backend."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def register(sub: Any) -> None:
    crd = sub.add_parser(
        "crd",
        help="print the PrimusJob CustomResourceDefinition (YAML)",
        description="Print the PrimusJob CRD. Its OpenAPI schema is generated from the same models that "
        "validate jobs locally, so the apiserver refuses what `primus validate` refuses.",
    )
    crd.set_defaults(handler=cmd_crd)

    k8s = sub.add_parser(
        "k8s", help="install the CRD and RBAC in a cluster", description="Kubernetes set-up."
    )
    ksub = k8s.add_subparsers(dest="k8s_command", metavar="COMMAND", required=True)

    install = ksub.add_parser(
        "install",
        help="apply the CRD (and with --rbac the master's RBAC) — idempotent",
        description="Apply the PrimusJob CRD with server-side apply and wait until it is established. "
        "With --rbac also apply the master's ServiceAccount, Role and bindings in --namespace.",
    )
    _cluster_args(install)
    install.add_argument("--rbac", action="store_true", help="also apply the RBAC manifests in --namespace")
    install.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the CRD (default 60)"
    )
    install.add_argument(
        "--conversion-webhook",
        action="store_true",
        help="also run the conversion webhook in --namespace (Deployment, Service, serving Secret) and "
        "make the CRD convert between its versions through it (default: the apiserver's own rewrite)",
    )
    install.add_argument("--image", help="the webhook's image (default: the provider's)")
    install.set_defaults(handler=cmd_install)

    webhook = ksub.add_parser(
        "conversion-webhook",
        help="serve the PrimusJob conversion webhook (what its Deployment runs)",
        description="Serve ConversionReviews over HTTPS on POST /convert with tls.crt and tls.key "
        "from --tls-dir (the serving Secret's mount), until interrupted.",
    )
    webhook.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    webhook.add_argument("--port", type=int, default=8443)
    webhook.add_argument("--tls-dir", required=True, help="folder holding tls.crt and tls.key")
    webhook.set_defaults(handler=cmd_conversion_webhook)

    manifests = ksub.add_parser(
        "manifests",
        help="print the RBAC manifests (and a job's master driver pod)",
        description="Print the ServiceAccount, Roles and bindings the master needs in NAMESPACE; with "
        "--master JOB also the driver pod that runs JOB's master.",
    )
    manifests.add_argument("--namespace", "-n", default="default")
    manifests.add_argument("--master", metavar="JOB", help="also print the master driver pod of JOB")
    manifests.add_argument("--image", help="the image of the master pod (default: the provider's)")
    manifests.add_argument(
        "--document",
        action="append",
        default=[],
        help="a path the job references (mounted in the master pod)",
    )
    manifests.set_defaults(handler=cmd_manifests)

    policy = ksub.add_parser(
        "network-policy",
        help="print a job's NetworkPolicies (submission creates them)",
        description="Print the NetworkPolicies that let only JOB's own pods reach its executors and "
        "master, and callers labelled primus.dev/control-client=true (or from --control-from) reach "
        "its control API. Submitting a job to a cluster creates them, owned by the job.",
    )
    policy.add_argument("job", metavar="JOB")
    policy.add_argument("--namespace", "-n", default="default")
    policy.add_argument("--control-port", type=int, default=0, help="the job's fixed control.port, if any")
    policy.add_argument(
        "--control-from",
        action="append",
        default=[],
        metavar="CIDR",
        help="a network that may call the control API (spec.backend.kubernetes.control_from)",
    )
    policy.set_defaults(handler=cmd_network_policy)


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", default="default", help="namespace for the RBAC objects")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context")


def _dump(docs: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump_all(docs, sort_keys=False)


def cmd_crd(_args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.crd import crd

    sys.stdout.write(_dump([crd()]))
    return 0


def cmd_manifests(args: argparse.Namespace) -> int:
    from airflow_provider_primus.kubernetes.manifests import DEFAULT_IMAGE, master_pod, rbac

    docs = rbac(args.namespace)
    if args.master:
        docs.append(master_pod(args.master, args.namespace, args.image or DEFAULT_IMAGE, args.document))
    sys.stdout.write(_dump(docs))
    return 0


def cmd_network_policy(args: argparse.Namespace) -> int:
    from airflow_provider_primus.kubernetes.manifests import network_policies

    docs = network_policies(
        args.job, args.namespace, control_port=args.control_port, control_from=args.control_from
    )
    sys.stdout.write(_dump(docs))
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts.crd import CRD_NAME, crd
    from airflow_provider_primus.kubernetes.client import KubeApi, KubeError, api_client_from
    from airflow_provider_primus.kubernetes.install import apply, wait_established
    from airflow_provider_primus.kubernetes.manifests import rbac

    try:
        api = KubeApi(api_client_from(kubeconfig=args.kubeconfig, context=args.context))
        started = time.monotonic()
        conversion = None
        if args.conversion_webhook:
            from airflow_provider_primus.kubernetes.install import install_conversion_webhook
            from airflow_provider_primus.kubernetes.manifests import DEFAULT_IMAGE

            conversion = install_conversion_webhook(api, args.namespace, args.image or DEFAULT_IMAGE)
            print(f"conversion webhook applied in namespace {args.namespace}")
        apply(api, crd(conversion))
        wait_established(api, CRD_NAME, args.timeout)
        print(f"customresourcedefinition/{CRD_NAME} established ({time.monotonic() - started:.1f}s)")
        if args.rbac:
            for doc in rbac(args.namespace):
                apply(api, doc)
                print(f"{doc['kind'].lower()}/{doc['metadata']['name']} applied")
    except (KubeError, TimeoutError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_conversion_webhook(args: argparse.Namespace) -> int:
    from pathlib import Path

    from airflow_provider_primus.kubernetes.conversion import ConversionWebhook

    folder = Path(args.tls_dir)
    server = ConversionWebhook(args.host, args.port, folder / "tls.crt", folder / "tls.key")
    print(f"conversion webhook on https://{args.host}:{server.port}/convert", flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
