"""``primus demo``: the main job on the embedded defaults.

Today it brings up the local stack — the embedded Kafka broker and Airflow (the standalone components,
127.0.0.1, SQLite) with this provider's DAGs — and prints where to log in. Later issues extend it to run the
full planning + hybrid training job on generated data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from airflow_provider_primus.embedded.airflow_local import AirflowLocal
from airflow_provider_primus.embedded.kafka import broker
from airflow_provider_primus.embedded.kafka.distribution import DEFAULT_KAFKA_VERSION, ensure_distribution
from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import StopRequested


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run the local stack: embedded Kafka + Airflow with this provider's DAGs",
        description="Start the embedded Kafka broker and Airflow (scheduler, dag-processor, triggerer, "
        "api-server) on 127.0.0.1, print where "
        "to log in, and run until Ctrl-C. --check starts everything, waits until healthy and stops.",
    )
    parser.add_argument("--home", type=Path, help="demo state (default: $PRIMUS_HOME/demo)")
    parser.add_argument(
        "--dags-folder", type=Path, default=Path("dags"), help="DAGs to load (default: ./dags)"
    )
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI/API port on 127.0.0.1")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--check", action="store_true", help="exit 0 once everything is healthy")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    home: Path = args.home or primus_home() / "demo"
    dags = args.dags_folder.resolve()
    if not dags.is_dir():
        print(f"error: dags folder {dags} does not exist (run from the repository root)", file=sys.stderr)
        return 1
    stop = StopRequested()
    kafka = broker.EmbeddedKafka(ensure_distribution(args.kafka_version), home / "kafka", instance="demo")
    state = kafka.start()
    print(f"kafka      | broker ready at {state.bootstrap_servers} ({state.startup_seconds}s)", flush=True)
    airflow = AirflowLocal(
        home / "airflow", dags, port=args.port, extra_env={"PRIMUS_KAFKA_BOOTSTRAP": state.bootstrap_servers}
    )
    try:
        airflow.start()
        airflow.wait_ready()
        print(
            f"primus     | Airflow is ready: {airflow.url}\n"
            f"primus     | log in as admin, password in {airflow.password_file}\n"
            f"primus     | Kafka: {state.bootstrap_servers}; component logs in {airflow.log_dir}\n"
            "primus     | Ctrl-C stops everything.",
            flush=True,
        )
        if not args.check:
            while not stop.wait(1.0):
                if dead := airflow.exited():
                    print(
                        f"error: Airflow component(s) exited: {dead}; see {airflow.log_dir}", file=sys.stderr
                    )
                    return 1
    finally:
        airflow.stop()
        kafka.stop()
    return 0
