"""``primus serve-data``: one data executor process (the backends launch these)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from airflow_provider_primus.data.service.options import COMMAND, DataExecutorOptions


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        COMMAND,
        help="run a data executor: lease tasks, transform, serve batches over Arrow Flight",
        description="Start a data executor. It registers with the dispatcher, leases tasks, reads and "
        "transforms them and serves batches over Flight with credit-based flow control. The job token "
        "comes from $PRIMUS_JOB_TOKEN or --token-file (never the command line). Prints its location as "
        "JSON when ready; exits when the job is finished or on SIGTERM.",
    )
    DataExecutorOptions.add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError, load_data_spec
    from airflow_provider_primus.credentials import load_token
    from airflow_provider_primus.data.service.executor import serve

    options = DataExecutorOptions.from_namespace(args)
    try:
        spec = load_data_spec(options.spec)
        token = load_token(options.token_file)
    except (SpecError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return serve(options, spec, token)
