"""``primus demo``: the main job on the embedded defaults (see ``embedded/demo_stack.py``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_primus.embedded.kafka.distribution import DEFAULT_KAFKA_VERSION
from airflow_provider_primus.paths import primus_home
from airflow_provider_primus.process import StopRequested


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="the main job: Kafka + Airflow on loopback, a streaming trainer and a daily backfill",
        description="Start the embedded Kafka broker and Airflow (scheduler, dag-processor, triggerer, "
        "api-server) on 127.0.0.1, generate a drifting click log (daily history + a live stream), start the "
        "streaming trainer DAG, backfill the daily DAG over --days days (each day's window joins the "
        "streaming job) beside a batch-only baseline, produce the stream live (event time = now) with a "
        "burst, print where to log in and the job's metrics, and run until Ctrl-C. --check exits once "
        "the windows are consumed, the stream is trained and a model is published, after up to five minutes "
        "of stream, reporting what the page does not show yet (showcase_missing): seconds of freshness, "
        "both AUCs, the autoscaler's answer to the burst, the windows in order.",
    )
    parser.add_argument("--home", type=Path, help="demo state (default: $PRIMUS_HOME/demo)")
    parser.add_argument(
        "--dags-folder", type=Path, default=Path("dags"), help="DAGs to load (default: ./dags)"
    )
    parser.add_argument("--port", type=int, default=8080, help="Airflow UI/API port on 127.0.0.1")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 0 once the backfilled windows are consumed, the stream trained and a model published; "
        "the JSON's showcase_missing lists what the page does not show yet",
    )
    parser.add_argument("--rate", type=float, default=100.0, help="stream rows/s (default: 100)")
    parser.add_argument(
        "--burst-at", type=float, default=90.0, help="seconds into the stream the burst starts (default: 90)"
    )
    parser.add_argument("--burst-s", type=float, default=30.0, help="how long it lasts (default: 30)")
    parser.add_argument(
        "--burst-rate", type=float, default=4000.0, help="stream rows/s during the burst (default: 4000)"
    )
    parser.add_argument("--days", type=int, default=3, help="days the daily DAG backfills (default: 3)")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for that (default: 900)"
    )
    parser.set_defaults(handler=run)


def _done(days: int) -> Any:
    def done(summary: dict[str, Any]) -> bool:
        windows = summary["windows"]
        trained = summary.get("rows_trained") or {}
        return (
            len(windows) >= days
            and all(w["consumed"] for w in windows)
            and trained.get("events", 0) > 0
            and bool(summary["snapshots"])
        )

    return done


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.embedded.demo_stack import JOB, DemoError, DemoStack, missing_from_showcase

    home: Path = args.home or primus_home() / "demo"
    dags = args.dags_folder.resolve()
    if not dags.is_dir():
        print(f"error: dags folder {dags} does not exist (run from the repository root)", file=sys.stderr)
        return 1
    stop = StopRequested()
    stack = DemoStack(
        home,
        dags,
        port=args.port,
        kafka_version=args.kafka_version,
        rate=args.rate,
        burst_at_s=args.burst_at,
        burst_s=args.burst_s,
        burst_rate=args.burst_rate,
    )

    def log(line: str) -> None:
        print(line, flush=True)

    try:
        stack.start(log)
        first, last = stack.launch(args.days, log)
        assert stack.airflow is not None
        url = stack.airflow.url
        log(f"primus     | streaming trainer DAG started (job {JOB}); backfill {first[:10]}..{last[:10]}")
        log(f"primus     | Airflow UI: {url} (user admin, password in {stack.airflow.password_file})")
        log(f"primus     | Primus jobs: {url}/primus/jobs; Ctrl-C stops everything.")
        summary = stack.wait(_done(args.days), args.timeout, "windows, stream and snapshot", log)
        code, _ = stack.plugin_page()
        summary["plugin_page_status"] = code
        log(f"primus     | metrics: {json.dumps(summary)}")
        if args.check:
            if code != 200:
                return 1
            # What the page is for: waited for up to five minutes of stream and reported, so a
            # missing piece shows in the JSON (``showcase_missing``) without failing the stack check.
            deadline = time.monotonic() + max(0.0, 300.0 - (summary.get("stream_s") or 0.0))
            while (missing := missing_from_showcase(summary, stack.plugin_page()[1])) and (
                time.monotonic() < deadline
            ):
                time.sleep(5.0)
                summary = stack.summary()
            summary["showcase_missing"] = missing
            print(json.dumps(summary))
            return 0
        while not stop.wait(15.0):
            log(f"primus     | metrics: {json.dumps(stack.summary())}")
            if dead := stack.airflow.exited():
                print(
                    f"error: Airflow component(s) exited: {dead}; see {stack.airflow.log_dir}",
                    file=sys.stderr,
                )
                return 1
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
    return 0
