"""Entry point of the ``primus`` console script.

Each subcommand lives in its own module with a ``register(subparsers)`` function; modules import
their heavy dependencies (Airflow, torch, Kafka clients) inside the handler so ``primus --help``
stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from airflow_provider_primus import __version__
from airflow_provider_primus.cli import (
    bench,
    cluster,
    control,
    convert,
    demo,
    doctor,
    gen,
    jobs,
    k8s,
    kafka,
    plan,
    serve_data,
    train,
    validate,
    yarn,
)
from airflow_provider_primus.process import EXIT_FILE_ENV, run_executor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="primus",
        description="Primus for Airflow: plan data, run training jobs and manage local services.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    version = sub.add_parser("version", help="print the provider's version", description="Print the version.")
    version.set_defaults(handler=lambda _args: print(__version__) or 0)
    doctor.register(sub)
    kafka.register(sub)
    demo.register(sub)
    validate.register(sub)
    convert.register(sub)
    plan.register(sub)
    bench.register(sub)
    serve_data.register(sub)
    train.register(sub)
    gen.register(sub)
    jobs.register(sub)
    k8s.register(sub)
    cluster.register(sub)
    control.register(sub)
    yarn.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a launcher re-runs itself per trainer
    exit_file = os.environ.get(EXIT_FILE_ENV)
    if exit_file:  # an executor launched by a master that may not be its parent when it ends
        return run_executor(lambda: int(args.handler(args)), Path(exit_file))
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
