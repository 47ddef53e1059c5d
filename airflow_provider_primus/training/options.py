"""What a trainer is told, from the job document to the runtime: the one definition of the `primus
train` options a master sets, and the runtime's options that carry them.

The master builds the trainer's command line from :class:`TrainerExecutorOptions` and `primus train`
declares the same options from it, in this module, so a flag cannot be renamed or retyped on one side
only (a round-trip test holds them together). `primus train` parses them back into the same record and
:meth:`TrainOptions.for_executor` hands each field to the runtime under the same name; what only a
process in this interpreter can give (callbacks, ready-made feeds) is added there. `primus train` adds
options of its own for standalone use (--mode, --fresh, --trainers); the job token comes from the
environment, never the command line.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the runtime's types; this module stays importable without torch (the master's)
    from airflow_provider_primus.data.tensors import TensorBatch
    from airflow_provider_primus.training.feeds.feed import Feed

__all__ = ["COMMAND", "EXIT_REGROUP", "TrainOptions", "TrainerExecutorOptions", "default_workdir"]

COMMAND = "train"
# A job's trainer that stopped at a checkpoint because its master regroups the trainers (another
# count): not a failure and not the end of training; the master starts the next group.
EXIT_REGROUP = 75


@dataclass(frozen=True)
class TrainerExecutorOptions:
    spec: Path  # the PrimusData document
    workdir: Path | None = None  # checkpoints and model snapshots
    training: Path | None = None  # a PrimusTraining document (default: the embedded defaults)
    follow: bool = False  # keep consuming the stream
    max_steps: int | None = None
    trace: Path | None = None  # one JSON line per step naming the rows it trained
    passthrough: tuple[str, ...] = ()  # columns carried to the trace
    json: bool = False  # the final metrics as one JSON line last
    # Set by a job's master only (hidden from `primus train --help`):
    dispatcher: str | None = None  # the master's data service: leases, telemetry, commands
    executor_name: str = "trainer-0"
    open_graph: bool = False  # the master may still append windows
    grace_s: float = 0.0  # how long to wait for a restarting master
    # Data parallelism in a job: this trainer's rank among ``trainers``, the group's generation (one
    # per start of the group, so a trainer of a superseded group cannot join the new one) and the
    # address the leader's rendezvous store listens on.
    trainers: int = 1
    rank: int = 0
    generation: int = 0
    host: str = "127.0.0.1"

    def argv(self) -> list[str]:
        """The ``primus`` arguments that start this trainer (after the interpreter and module)."""
        args = [COMMAND, str(self.spec)]
        for flag, value in (
            ("--workdir", self.workdir),
            ("--training", self.training),
            ("--max-steps", self.max_steps),
            ("--trace", self.trace),
            ("--dispatcher", self.dispatcher),
        ):
            if value is not None:
                args += [flag, str(value)]
        for flag, on in (("--follow", self.follow), ("--json", self.json), ("--open-graph", self.open_graph)):
            if on:
                args.append(flag)
        args += ["--executor-name", self.executor_name, "--grace-s", str(self.grace_s)]
        if self.trainers != 1 or self.rank or self.generation:
            args += ["--trainers", str(self.trainers), "--rank", str(self.rank)]
            args += ["--generation", str(self.generation), "--host", self.host]
        if self.passthrough:
            args += ["--passthrough", *self.passthrough]
        return args

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        defaults = TrainerExecutorOptions(Path("."))
        parser.add_argument("spec", type=Path, help="the PrimusData document (YAML or JSON)")
        parser.add_argument(
            "--training", type=Path, help="a PrimusTraining document (default: the embedded defaults)"
        )
        parser.add_argument(
            "--workdir", type=Path, help="checkpoints and model snapshots (default: a temp dir)"
        )
        parser.add_argument(
            "--follow", action="store_true", help="keep consuming the stream until interrupted"
        )
        parser.add_argument(
            "--max-steps", type=int, help="stop after this many steps (counted across resumes)"
        )
        parser.add_argument(
            "--trace", type=Path, help="append one JSON line per step with the rows it trained (for audits)"
        )
        parser.add_argument(
            "--passthrough", nargs="*", default=[], help="columns carried to --trace (e.g. an id)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print the final metrics as one JSON line last"
        )
        # Set by a job's master when it launches this as the job's trainer executor.
        parser.add_argument("--dispatcher", help=argparse.SUPPRESS)
        parser.add_argument("--executor-name", default=defaults.executor_name, help=argparse.SUPPRESS)
        parser.add_argument("--open-graph", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--grace-s", type=float, default=defaults.grace_s, help=argparse.SUPPRESS)
        parser.add_argument(
            "--trainers",
            type=int,
            help="data-parallel trainer processes (overrides the training spec); rank 0 prints the result",
        )
        parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # set by the launcher or master
        parser.add_argument("--generation", type=int, default=defaults.generation, help=argparse.SUPPRESS)
        parser.add_argument("--host", default=defaults.host, help=argparse.SUPPRESS)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> TrainerExecutorOptions:
        return cls(
            spec=args.spec,
            workdir=args.workdir,
            training=args.training,
            follow=args.follow,
            max_steps=args.max_steps,
            trace=args.trace,
            passthrough=tuple(args.passthrough or ()),
            json=args.json,
            dispatcher=args.dispatcher,
            executor_name=args.executor_name,
            open_graph=args.open_graph,
            grace_s=args.grace_s,
            trainers=args.trainers or 1,
            rank=args.rank or 0,
            generation=args.generation,
            host=args.host,
        )


@dataclass
class TrainOptions:
    workdir: Path
    mode: str | None = None  # overrides the training spec's
    spec_path: Path | None = None  # the data document on disk (executors read it); written if absent
    follow: bool = False  # keep following the stream instead of stopping at its end offsets
    max_steps: int | None = None
    passthrough: Sequence[str] = ()
    trace: Callable[[int, list[tuple[str, TensorBatch]]], None] | None = None
    progress: Callable[[dict[str, Any]], None] | None = None
    progress_every_s: float = 2.0
    resume: bool = True
    until: Callable[[Any], bool] | None = None  # given the Trainer before each step: stop when true
    feeds: Mapping[str, Feed] | None = None  # ready-made feeds instead of the sources (benchmarks)
    rank: int = 0  # data parallelism: this trainer's rank among ``trainers`` (see distributed.py)
    trainers: int = 1
    dist_init: str | None = None  # tcp://127.0.0.1:PORT, the rendezvous when trainers > 1
    # A job's trainers meet through their master instead: the group's generation, and the address
    # the leader's rendezvous store listens on (loopback locally, the pod's IP in a cluster).
    generation: int = 0
    host: str = "127.0.0.1"
    # As a job's trainer executor: the master's data service instead of one of our own, telemetry
    # and commands through it, and the allotment the backend gives us.
    dispatcher: str | None = None
    token: str | None = None
    open_graph: bool = False  # the job's master may still append windows
    grace_s: float = 0.0  # how long to wait for a restarting master
    executor_name: str = "trainer-0"
    # The trainer's job events (the stream's, the clock's) also go here: a caller without a master.
    on_event: Callable[[str, str, dict[str, Any]], None] | None = None

    @classmethod
    def for_executor(cls, executor: TrainerExecutorOptions, workdir: Path, **runtime: Any) -> TrainOptions:
        """The runtime's options for a trainer launched with ``executor``: every field the two
        records share passes under its own name; ``runtime`` adds what a command line cannot carry
        (callbacks, the job token) and what `primus train` decides for itself (mode, resume)."""
        return cls(
            workdir=workdir,
            spec_path=executor.spec.resolve(),
            follow=executor.follow,
            max_steps=executor.max_steps,
            passthrough=executor.passthrough,
            rank=executor.rank,
            trainers=executor.trainers,
            generation=executor.generation,
            host=executor.host,
            dispatcher=executor.dispatcher,
            open_graph=executor.open_graph,
            grace_s=executor.grace_s,
            executor_name=executor.executor_name,
            **runtime,
        )


def default_workdir() -> Path:
    """A trainer run without --workdir: a fresh temporary directory (its checkpoints are its own)."""
    return Path(tempfile.mkdtemp(prefix="primus-train-"))
