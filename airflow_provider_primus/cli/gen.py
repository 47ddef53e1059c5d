"""``primus gen --out DIR``: write a synthetic click log with drift (history files, spec, stream).

Options left unset take the demo world's values (``World.from_defaults``); the defaults in the help
text are repeated here so ``primus --help`` need not import numpy and pyarrow, and a test keeps the
two in step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_primus.cli.progress import Bar, on_terminal

# Options named after World fields; they default to None, meaning "the demo world's value".
WORLD_OPTIONS = (
    "history_days",
    "stream_days",
    "rows_per_day",
    "users",
    "items",
    "seed",
    "start",
    "drift",
    "label_delay_s",
)


# ``--start live``: day 0 chosen so that the last stream day is today (gen/clicklog.live_start).
LIVE = "live"


def _day(value: str) -> datetime | str:
    if value == LIVE:
        return LIVE
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD or {LIVE!r}, got {value!r}") from None


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "gen",
        help="generate a synthetic click log with drift: history files, a PrimusData spec, a stream",
        description="Write OUT/history/{date}/part-0.parquet (+ _SUCCESS) for the history days and "
        "OUT/primus-data.yaml; with --bootstrap-servers also produce the stream days to Kafka. The "
        "world is deterministic in its parameters and seed. Prints a JSON summary.",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output folder (created if missing), or s3://bucket/prefix for the history on an object "
        "store (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; the spec goes to --spec-dir)",
    )
    parser.add_argument(
        "--spec-dir", type=Path, help="with --out s3://…: where primus-data.yaml goes (default: .)"
    )
    parser.add_argument("--endpoint", help="with --out s3://…: the S3 endpoint, http(s)://host:port")
    parser.add_argument("--region", help="with --out s3://…: the bucket's region (default: us-east-1)")
    parser.add_argument(
        "--addressing", choices=("path", "virtual"), default="path", help="with --out s3://… (default: path)"
    )
    parser.add_argument("--history-days", type=int, help="days written as files (default: 20)")
    parser.add_argument("--stream-days", type=int, help="days after the history, produced (default: 3)")
    parser.add_argument("--rows-per-day", type=int, help="impressions per day (default: 20000)")
    parser.add_argument("--users", type=int, help="users on day 0; 3%% more arrive daily (default: 20000)")
    parser.add_argument("--items", type=int, help="items on day 0; 3%% more arrive daily (default: 5000)")
    parser.add_argument("--seed", type=int, help="random seed (default: 0)")
    parser.add_argument(
        "--start",
        type=_day,
        help="day 0, YYYY-MM-DD, UTC; 'live': the last stream day is today, so the stream's events are "
        "about now, as in a live topic (default: 2026-01-01)",
    )
    parser.add_argument(
        "--drift", type=float, help="daily std of the interest/item random walk, in [0, 1) (default: 0.15)"
    )
    parser.add_argument(
        "--label-delay-s",
        type=float,
        help="seconds until a click's label is known; the stream is produced in label order (default: 0)",
    )
    parser.add_argument(
        "--stationary-items",
        action="store_true",
        help="no item popularity lifecycle (novelty that fades with age, trending shocks): a "
        "stationary world, every other draw the same",
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka host:port to produce the stream to (default: none, files and spec only; the spec "
        "then names 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--topic", default="clicks", help="stream topic, created if missing (default: clicks)"
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions of a new topic (default: 1)")
    parser.add_argument(
        "--kafka-security",
        type=Path,
        help="a YAML/JSON file holding a Kafka source's 'security' mapping (protocol, sasl_mechanism, "
        "username, password_env, ssl_cafile, ...): the producer uses it and the spec's stream source "
        "gets it (docs/kafka.md, Secured clusters)",
    )
    parser.add_argument("--rate", type=float, default=0.0, help="stream rows/s; 0 = as fast as possible")
    parser.add_argument(
        "--json", action="store_true", help="only the JSON summary, no progress on a terminal"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from airflow_provider_primus.contracts import SpecError
    from airflow_provider_primus.gen.clicklog import World, live_start
    from airflow_provider_primus.gen.events import produce_stream
    from airflow_provider_primus.gen.files import DEFAULT_BOOTSTRAP, write_data_spec, write_history

    overrides = {name: getattr(args, name) for name in WORLD_OPTIONS if getattr(args, name) is not None}
    if args.stationary_items:
        overrides["item_lifecycle"] = False
    live = overrides.get("start") == LIVE
    if live:
        del overrides["start"]
    try:
        world = World.from_defaults(**overrides)
        if live:
            world = replace(world, start=live_start(world.days))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kafka_security: dict[str, Any] | None = None
    if args.kafka_security is not None:
        from airflow_provider_primus.contracts import read_document
        from airflow_provider_primus.contracts.kafka import KafkaSecurity

        try:
            kafka_security = read_document(args.kafka_security)
            KafkaSecurity.model_validate(kafka_security)
        except (OSError, ValueError) as exc:
            print(f"error: --kafka-security {args.kafka_security}: {exc}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    remote = str(args.out).startswith("s3://")
    storage = _storage_section(args) if remote else None
    spec_dir = (args.spec_dir or Path(".")) if remote else Path(args.out)
    try:
        spec = write_data_spec(
            world,
            spec_dir,
            bootstrap_servers=args.bootstrap_servers or DEFAULT_BOOTSTRAP,
            topic=args.topic,
            history_uri=f"{str(args.out).rstrip('/')}/history" if remote else None,
            storage=storage,
            kafka_security=kafka_security,
        )
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if remote:
        from airflow_provider_primus.contracts.storage import ObjectStorage
        from airflow_provider_primus.data.objectstore import open_object_store
        from airflow_provider_primus.gen.files import write_history_to

        try:
            fs, root = open_object_store(
                str(args.out),
                ObjectStorage.model_validate(storage),
                owner="primus gen",
                allow_bucket_creation=True,
            )
            fs.create_dir(root.split("/", 1)[0])  # the bucket, where the store allows it
            with _bar("history days", world.history_days, args) as bar:
                files: list[Any] = write_history_to(world, fs, root, on_day=lambda: bar.update(advance=1))
        except OSError as exc:
            print(f"error: writing the history to {args.out}: {exc}", file=sys.stderr)
            return 1
    else:
        with _bar("history days", world.history_days, args) as bar:
            files = write_history(world, Path(args.out), on_day=lambda: bar.update(advance=1))
    messages = None
    if args.bootstrap_servers:
        from kafka.errors import KafkaError

        from airflow_provider_primus.contracts.kafka import KafkaSecurity
        from airflow_provider_primus.data.sources.kafka_client import KafkaAuthError, tool_client

        try:
            target = tool_client(
                args.bootstrap_servers,
                KafkaSecurity.model_validate(kafka_security) if kafka_security else None,
                owner="primus gen",
            )
            with _bar("stream rows", world.stream_days * world.rows_per_day, args) as bar:
                messages = produce_stream(
                    world,
                    target,
                    args.topic,
                    rate=args.rate,
                    partitions=args.partitions,
                    on_rows=lambda n: bar.update(advance=n),
                )
        except (KafkaError, KafkaAuthError, ValueError) as exc:
            print(f"error: producing to {args.bootstrap_servers}: {exc!r}", file=sys.stderr)
            return 1
    summary = {
        "history_files": len(files),
        "history_rows": len(files) * world.rows_per_day,
        "stream_messages": messages,
        "topic": args.topic if messages is not None else None,
        "spec": str(spec),
        "users": world.users_on(world.days - 1),
        "items": world.items_on(world.days - 1),
        "item_lifecycle": world.item_lifecycle,
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    print(json.dumps(summary))
    return 0


def _bar(what: str, total: int, args: argparse.Namespace) -> Bar:
    return Bar(what, total=total, enabled=on_terminal(args.json))


def _storage_section(args: argparse.Namespace) -> dict[str, Any]:
    """The spec's ``storage`` for ``--out s3://…``: the endpoint and region given, and the AWS
    environment variables' *names* when they are set here (never their values)."""
    import os

    section: dict[str, Any] = {"addressing": args.addressing}
    if args.endpoint:
        section["endpoint"] = args.endpoint
    if args.region:
        section["region"] = args.region
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        section["credentials"] = {"env": {}}
    return section
