"""``primus bench …``: measured figures, printed as one JSON line per run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="run a benchmark and print one JSON line",
        description="Benchmarks (see docs/benchmarks.md).",
    )
    bsub = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    p = bsub.add_parser(
        "plan",
        help="serial vs parallel vs incremental planning on a store with a per-call delay",
        description="Plan days x 2 sources x 24 hourly partitions x FILES Parquet files through a "
        "filesystem adding DELAY ms per listing/metadata call: serially, with the default planner, "
        "and incrementally after one more day; plus tasks/s on a local tree without delay.",
    )
    p.add_argument("--days", type=int, default=20)
    p.add_argument("--files", type=int, default=4, help="files per hourly partition")
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--local-files", type=int, default=100_000, help="0 skips the no-delay measurement")
    p.add_argument("--workdir", type=Path, help="where to generate the stores (default: system temp)")
    p.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    from airflow_provider_primus.bench.plan import run

    result = run(
        days=args.days,
        files=args.files,
        delay_ms=args.delay_ms,
        local_files=args.local_files,
        workdir=args.workdir,
    )
    print(json.dumps(result))
    return 0
