"""``primus doctor``: what is present, what is missing, and the command that fixes it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from airflow_provider_primus.buildcache.kafka import DEFAULT_KAFKA_VERSION
from airflow_provider_primus.diagnostics import healthy, run_checks


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check Python, Java, the Kafka jars and the Airflow DB",
        description="Check what this machine needs and print the fix for anything missing. "
        "Exits 0 when everything required is present, 1 otherwise.",
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="provider cache (default: $PRIMUS_CACHE_DIR or ~/.cache/...)"
    )
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--skip-airflow-db", action="store_true", help="do not check the Airflow metadata DB")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    checks = run_checks(
        kafka_version=args.kafka_version, cache=args.cache_dir, airflow_db=not args.skip_airflow_db
    )
    ok = healthy(checks)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [c.as_dict() for c in checks]}))
    else:
        for c in checks:
            mark = "ok" if c.ok else ("MISSING" if c.required else "warn")
            print(f"{mark:8} {c.name:11} {c.detail}")
            if not c.ok:
                print(f"{'':8} {'':11} fix: {c.fix}")
        missing = [c.name for c in checks if not c.ok and c.required]
        print("all required pieces present" if ok else f"missing: {', '.join(missing)}")
    return 0 if ok else 1
