"""``primus kafka fetch | up | down | status``: the embedded development broker."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_provider_primus.embedded.kafka import broker
from airflow_provider_primus.embedded.kafka.distribution import (
    DEFAULT_KAFKA_VERSION,
    KafkaDistributionError,
    ensure_distribution,
)
from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import StopRequested

NOT_RUNNING = 3


def default_workdir() -> Path:
    return primus_home() / "kafka"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "kafka",
        help="run the embedded Apache Kafka broker for local development",
        description="A real single-node Apache Kafka (KRaft) on 127.0.0.1, from jars cached by Maven.",
    )
    ksub = parser.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser, *, dist: bool = True) -> None:
        if dist:
            p.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
            p.add_argument("--cache-dir", type=Path, help="where the jars are cached")
        p.add_argument(
            "--workdir", type=Path, default=None, help="broker state and data (default: $PRIMUS_HOME/kafka)"
        )

    fetch = ksub.add_parser(
        "fetch",
        help="resolve the broker's jars with Maven into the cache",
        description="Resolve org.apache.kafka:kafka_2.13 and its runtime classpath once.",
    )
    fetch.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    fetch.add_argument("--cache-dir", type=Path, help="where the jars are cached")
    fetch.set_defaults(handler=run_fetch)

    up = ksub.add_parser(
        "up",
        help="start the broker (detached unless --foreground)",
        description="Start the broker on 127.0.0.1 and print its state as JSON. Topics and offsets "
        "of an earlier run on the same work dir are kept (and its port, when free); --reset wipes them.",
    )
    common(up)
    up.add_argument("--port", type=int, help="client port (default: a free port)")
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops the broker")
    up.add_argument(
        "--reset",
        action="store_true",
        help="delete the broker's topics and offsets first (by default they are kept across down/up)",
    )
    up.set_defaults(handler=run_up)

    down = ksub.add_parser("down", help="stop the broker", description="Stop the detached broker cleanly.")
    common(down, dist=False)
    down.set_defaults(handler=run_down)

    status = ksub.add_parser(
        "status",
        help="print the broker's state; exit 3 when it is not running",
        description="Print the running broker's state as JSON (exit 0) or exit 3.",
    )
    common(status, dist=False)
    status.set_defaults(handler=run_status)


def run_fetch(args: argparse.Namespace) -> int:
    try:
        dist = ensure_distribution(args.kafka_version, args.cache_dir)
    except KafkaDistributionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"version": dist.version, "home": str(dist.home)}))
    return 0


def run_up(args: argparse.Namespace) -> int:
    workdir = args.workdir or default_workdir()
    existing = broker.running_state(workdir)
    if existing is not None:
        print(existing.to_json())
        return 0
    try:
        dist = ensure_distribution(args.kafka_version, args.cache_dir)
        kafka = broker.EmbeddedKafka(
            dist, workdir, port=args.port, detach=not args.foreground, reset=args.reset
        )
        state = kafka.start()
    except (KafkaDistributionError, broker.BrokerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(state.to_json(), flush=True)
    if not args.foreground:
        return 0
    stop = StopRequested()
    while not stop.wait(1.0):
        if kafka.process is not None and kafka.process.poll() is not None:
            print(f"error: broker exited:\n{kafka.log_tail()}", file=sys.stderr)
            return 1
    kafka.stop()
    return 0


def run_down(args: argparse.Namespace) -> int:
    state = broker.stop_detached(args.workdir or default_workdir())
    print("stopped" if state else "not running")
    return 0


def run_status(args: argparse.Namespace) -> int:
    state = broker.running_state(args.workdir or default_workdir())
    if state is None or not broker.broker_answers(state.bootstrap_servers):
        print("not running")
        return NOT_RUNNING
    print(state.to_json())
    return 0
