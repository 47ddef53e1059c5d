"""``primus train``: hybrid training in the foreground, on any data a PrimusData document describes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "train",
        help="train a DLRM-style model from file windows and a Kafka stream (batch|stream|mixed)",
        description="Train one model from the sources of a PrimusData document: historical files "
        "through the data service and a Kafka stream of JSON events, mixed by the document's mixture "
        "weights and priorities and the training spec's policy. The stream is scored before it is "
        "trained on (progressive validation) in every mode. Checkpoints are written under --workdir "
        "and a rerun resumes from the newest one. Stops at the stream's current end unless --follow.",
    )
    parser.add_argument("spec", type=Path, help="the PrimusData document (YAML or JSON)")
    parser.add_argument(
        "--training", type=Path, help="a PrimusTraining document (default: the embedded defaults)"
    )
    parser.add_argument("--mode", choices=("batch", "stream", "mixed"), help="overrides the training spec")
    parser.add_argument("--workdir", type=Path, help="checkpoints and model snapshots (default: a temp dir)")
    parser.add_argument("--follow", action="store_true", help="keep consuming the stream until interrupted")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (counted across resumes)")
    parser.add_argument("--fresh", action="store_true", help="ignore existing checkpoints in --workdir")
    parser.add_argument(
        "--trace", type=Path, help="append one JSON line per step with the rows it trained (for audits)"
    )
    parser.add_argument(
        "--passthrough", nargs="*", default=[], help="columns carried to --trace (e.g. an id)"
    )
    parser.add_argument("--json", action="store_true", help="print the final metrics as one JSON line last")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.spec import SpecError, load_data_spec
    from airflow_provider_primus.spec.loader import load_training_spec
    from airflow_provider_primus.spec.training import default_training
    from airflow_provider_primus.training.runtime import (
        Trainer,
        TrainOptions,
        default_workdir,
        print_progress,
    )
    from airflow_provider_primus.training.trace import TraceWriter

    try:
        data = load_data_spec(args.spec)
        training = (
            load_training_spec(args.training) if args.training else default_training(data.metadata.name)
        )
        options = TrainOptions(
            workdir=args.workdir or default_workdir(),
            mode=args.mode,
            spec_path=args.spec.resolve(),
            follow=args.follow,
            max_steps=args.max_steps,
            passthrough=tuple(args.passthrough),
            resume=not args.fresh,
            progress=print_progress,
        )
        trace = TraceWriter(args.trace, args.passthrough) if args.trace else None
        options.trace = trace
        trainer = Trainer(data, training, options)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"primus train: mode {trainer.mode}, workdir {options.workdir}", file=sys.stderr, flush=True)
    try:
        result = trainer.run()
    except KeyboardInterrupt:
        print("interrupted; the newest checkpoint is kept", file=sys.stderr)
        return 130
    finally:
        if trace is not None:
            trace.close()
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0
