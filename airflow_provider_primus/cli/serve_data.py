"""``primus serve-data``: one data executor process (the backends launch these)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve-data",
        help="run a data executor: lease tasks, transform, serve batches over Arrow Flight",
        description="Start a data executor. It registers with the dispatcher, leases tasks, reads and "
        "transforms them and serves batches over Flight with credit-based flow control. The job token "
        "comes from $PRIMUS_JOB_TOKEN or --token-file (never the command line). Prints its location as "
        "JSON when ready; exits when the job is finished or on SIGTERM.",
    )
    parser.add_argument("spec", type=Path, help="the PrimusData spec the tasks were planned from")
    parser.add_argument("--dispatcher", required=True, help="dispatcher location, e.g. grpc://127.0.0.1:5000")
    parser.add_argument("--name", required=True, help="executor name, unique within the job")
    parser.add_argument("--token-file", type=Path, help="file holding the job token")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: a free port)")
    parser.add_argument("--window", type=int, default=8, help="batches read ahead of the trainer, at most")
    parser.add_argument("--batch-rows", type=int, default=8192)
    parser.add_argument(
        "--transform-threads", type=int, default=2, help="batches transformed side by side (default: 2)"
    )
    parser.add_argument("--passthrough", nargs="*", help="extra columns sent unchanged (e.g. a row id)")
    parser.add_argument("--heartbeat-s", type=float, default=1.0, help="heartbeat interval to the dispatcher")
    parser.add_argument(
        "--master-grace-s",
        type=float,
        default=0.0,
        help="keep retrying an unreachable dispatcher this long (a job's master restarting)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.data.service.auth import load_token
    from airflow_provider_primus.data.service.executor import serve
    from airflow_provider_primus.spec import SpecError, load_data_spec

    try:
        spec = load_data_spec(args.spec)
        token = load_token(args.token_file)
    except (SpecError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return serve(args, spec, token)
