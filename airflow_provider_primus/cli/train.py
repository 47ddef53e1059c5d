"""``primus train``: hybrid training in the foreground, on any data a PrimusData document describes."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from airflow_provider_primus.cli.progress import Bar, chatty, on_terminal
from airflow_provider_primus.process import primus_command
from airflow_provider_primus.training.options import (
    COMMAND,
    EXIT_REGROUP,
    TrainerExecutorOptions,
    TrainOptions,
    default_workdir,
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        COMMAND,
        help="train a DLRM-style model from file windows and a Kafka stream (batch|stream|mixed)",
        description="Train one model from the sources of a PrimusData document: historical files "
        "through the data service and a Kafka stream of JSON events, mixed by the document's mixture "
        "weights and priorities and the training spec's policy. The stream is scored before it is "
        "trained on (progressive validation) in every mode. Checkpoints are written under --workdir "
        "and a rerun resumes from the newest one. Stops at the stream's current end unless --follow.",
    )
    TrainerExecutorOptions.add_arguments(parser)
    parser.add_argument("--mode", choices=("batch", "stream", "mixed"), help="overrides the training spec")
    parser.add_argument("--fresh", action="store_true", help="ignore existing checkpoints in --workdir")
    # Set by the launcher for each trainer process it starts.
    parser.add_argument("--dist-init", help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launch(args: argparse.Namespace, world: int) -> int:
    """Start ``world`` trainer processes of this same command and wait for all of them; a failed
    trainer fails the job (the others then stop at their next collective, or are stopped)."""
    import subprocess

    from airflow_provider_primus.process import stop_process_group, tied_to_launcher

    init = f"tcp://127.0.0.1:{_free_port()}"
    procs = []
    for rank in range(world):
        command = primus_command(*args.argv)
        command += ["--trainers", str(world), "--rank", str(rank), "--dist-init", init]
        procs.append(
            subprocess.Popen(
                tied_to_launcher(command),
                stdout=None if rank == 0 else subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    codes: list[int] = []
    try:
        for p in procs:
            codes.append(p.wait())
            if codes[-1] != 0:
                break
    finally:
        for p in procs:
            if p.poll() is None:
                stop_process_group(p.pid, child=p, grace_s=5)
    return next((c for c in codes if c != 0), 0)


def _job_token() -> str:
    from airflow_provider_primus.credentials import load_token

    return load_token(None)


def run(args: argparse.Namespace) -> int:
    from airflow_provider_primus.contracts import SpecError, load_data_spec
    from airflow_provider_primus.contracts.loader import load_training_spec
    from airflow_provider_primus.contracts.training import default_training
    from airflow_provider_primus.resources.allotment import passive_idle_threads

    passive_idle_threads()  # before torch loads its OpenMP runtime
    try:
        import torch  # noqa: F401 - only to say which extra brings it when it is missing
    except ImportError:
        print(
            "primus train needs torch, which only the trainer uses: "
            "pip install 'airflow-provider-primus[train]'",
            file=sys.stderr,
        )
        return 2
    from airflow_provider_primus.training.runtime import Trainer
    from airflow_provider_primus.training.summary import print_progress, progress_line
    from airflow_provider_primus.training.trace import TraceWriter

    try:
        data = load_data_spec(args.spec)
        training = (
            load_training_spec(args.training) if args.training else default_training(data.metadata.name, data)
        )
        world = args.trainers or training.spec.trainers
        if world > 1 and args.rank is None and args.dispatcher is None:
            return launch(args, world)
        # Rank 0 reports for the job (the other ranks' stdout is discarded, their stderr is quiet).
        bar = Bar("training", total=args.max_steps, enabled=on_terminal(args.json) and not args.rank)

        def draw(summary: dict[str, Any]) -> None:
            bar.update(completed=summary["steps"], detail=progress_line(summary))

        progress = draw if bar.enabled else print_progress if chatty(args.json) and not args.rank else None
        trace_path = args.trace
        if world > 1 and trace_path is not None:  # one trace per trainer; "-" is rank 0's stdout
            if str(trace_path) == "-":
                trace_path = None if args.rank else trace_path
            else:
                trace_path = trace_path.with_name(f"{trace_path.name}.rank{args.rank}")
        executor = TrainerExecutorOptions.from_namespace(args)
        options = TrainOptions.for_executor(
            replace(executor, trainers=world, rank=args.rank or 0),
            args.workdir or default_workdir(),
            mode=args.mode,
            resume=not args.fresh,
            progress=progress,
            progress_every_s=0.5 if bar.enabled else TrainOptions.progress_every_s,
            dist_init=args.dist_init,
            token=_job_token() if args.dispatcher else None,
        )
        trace = TraceWriter(trace_path, args.passthrough) if trace_path else None
        options.trace = trace
        trainer = Trainer(data, training, options)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if chatty(args.json):
        print(f"primus train: mode {trainer.mode}, workdir {options.workdir}", file=sys.stderr, flush=True)
        if trainer.placement.gpu:  # where the model went, and the memory figures that decided it
            print(f"primus train: {trainer.placement.reason}", file=sys.stderr, flush=True)
    try:
        with bar:
            result = trainer.run()
            bar.update(completed=result["steps"])  # a short run ends before its first report
    except KeyboardInterrupt:
        print("interrupted; the newest checkpoint is kept", file=sys.stderr)
        return 130
    finally:
        if trace is not None:
            trace.close()
    if result.get("regrouped"):
        return EXIT_REGROUP  # stopped at a checkpoint: the job's master starts the next group
    if args.rank:
        return 0  # rank 0 reports for the job
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0
