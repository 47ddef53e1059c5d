"""``primus plan SPEC --start … --end …``: resolve a window into a task graph and summarize it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_primus.cli.progress import Bar, chatty, on_terminal
from airflow_provider_primus.paths import primus_home


def _when(value: str) -> datetime:
    t = datetime.fromisoformat(value)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan",
        help="plan a time window of a PrimusData spec into a task graph",
        description="List partitions and footers in parallel, size tasks, and print a JSON summary "
        "(partitions, files, tasks, rows, bytes, missing partitions, wall time).",
    )
    parser.add_argument("spec", type=Path, help="PrimusData YAML/JSON file")
    parser.add_argument("--start", type=_when, help="window start (ISO 8601; default: the spec's window)")
    parser.add_argument("--end", type=_when, help="window end, exclusive (default: the spec's window)")
    parser.add_argument("--workers", type=int, help="planner threads (default: spec planning.workers)")
    parser.add_argument("--out", type=Path, help="write the task graph here (Parquet)")
    parser.add_argument("--cache", type=Path, help="plan cache (default: $PRIMUS_HOME/plan-cache.sqlite)")
    parser.add_argument("--no-cache", action="store_true", help="list everything, use no cache")
    parser.add_argument("--refresh", action="store_true", help="list everything and refresh the cache")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--json", action="store_true", help="only the JSON summary: no progress, no warnings on a terminal"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError, load_data_spec
    from airflow_provider_primus.data.cache import PlanCache
    from airflow_provider_primus.data.planner import PlanCancelled, PlanOptions, Progress, plan
    from airflow_provider_primus.data.sources.files import MissingPartitionError

    try:
        spec = load_data_spec(args.spec)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    window = spec.spec.window
    start = args.start or (window.start if window else None)
    end = args.end or (window.end if window else None)
    if start is None:
        print("error: no window: pass --start/--end or set spec.window", file=sys.stderr)
        return 2
    if end is not None and end <= start:
        print("error: --end must be after --start", file=sys.stderr)
        return 2
    cache = None if args.no_cache else PlanCache(args.cache or primus_home() / "plan-cache.sqlite")
    bar = Bar("planning", enabled=on_terminal(args.json, disabled=args.no_progress))

    def progress(p: Progress) -> None:
        if p.partitions_total:
            bar.update(completed=p.partitions_done, total=p.partitions_total, detail=f"{p.tasks} tasks")

    t0 = time.perf_counter()
    try:
        with bar:
            graph = plan(
                spec,
                start,
                end,
                PlanOptions(workers=args.workers, cache=cache, refresh=args.refresh, progress=progress),
            )
    except (MissingPartitionError, PlanCancelled, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("planning cancelled", file=sys.stderr)
        return 130
    finally:
        if cache is not None:
            cache.close()
    for warning in graph.warnings if chatty(args.json) else ():  # in the JSON too: for a person
        print(f"warning: {warning}", file=sys.stderr)
    summary = graph.summary()
    summary["wall_s"] = round(time.perf_counter() - t0, 3)
    if args.out:
        graph.write(args.out)
        summary["out"] = str(args.out)
    print(json.dumps(summary))
    return 0
