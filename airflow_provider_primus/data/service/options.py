"""What a data executor is told when it is launched: the one definition of `primus serve-data`'s options.

The master builds a data executor's command line from this record and the CLI parses that command
line back into one, in this module, so a flag cannot be renamed or retyped on one side only (a
round-trip test holds them together). The job token is not an option: it comes from the environment
or a file, never the command line.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMMAND", "DataExecutorOptions"]

COMMAND = "serve-data"
LOOPBACK = "127.0.0.1"  # bind nothing beyond this machine unless the job says so


@dataclass(frozen=True)
class DataExecutorOptions:
    spec: Path  # the PrimusData document the tasks were planned from
    dispatcher: str  # the dispatcher's Flight location, e.g. grpc://127.0.0.1:5000
    name: str  # unique within the job (the master adds the incarnation)
    token_file: Path | None = None
    host: str = LOOPBACK
    port: int = 0
    window: int = 8
    batch_rows: int = 8192
    transform_threads: int = 2
    passthrough: tuple[str, ...] = ()
    heartbeat_s: float = 1.0
    master_grace_s: float = 0.0

    def argv(self) -> list[str]:
        """The ``primus`` arguments that start this executor (after the interpreter and module)."""
        args = [
            COMMAND,
            str(self.spec),
            "--dispatcher",
            self.dispatcher,
            "--name",
            self.name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--window",
            str(self.window),
            "--batch-rows",
            str(self.batch_rows),
            "--transform-threads",
            str(self.transform_threads),
            "--heartbeat-s",
            str(self.heartbeat_s),
            "--master-grace-s",
            str(self.master_grace_s),
        ]
        if self.token_file is not None:
            args += ["--token-file", str(self.token_file)]
        if self.passthrough:
            args += ["--passthrough", *self.passthrough]
        return args

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        defaults = DataExecutorOptions(Path("."), "", "")
        parser.add_argument("spec", type=Path, help="the PrimusData spec the tasks were planned from")
        parser.add_argument(
            "--dispatcher", required=True, help="dispatcher location, e.g. grpc://127.0.0.1:5000"
        )
        parser.add_argument("--name", required=True, help="executor name, unique within the job")
        parser.add_argument("--token-file", type=Path, help="file holding the job token")
        parser.add_argument("--host", default=defaults.host, help="address to bind (default: loopback only)")
        parser.add_argument(
            "--port", type=int, default=defaults.port, help="port to bind (default: a free port)"
        )
        parser.add_argument(
            "--window", type=int, default=defaults.window, help="batches read ahead of the trainer, at most"
        )
        parser.add_argument("--batch-rows", type=int, default=defaults.batch_rows)
        parser.add_argument(
            "--transform-threads",
            type=int,
            default=defaults.transform_threads,
            help=f"batches transformed side by side (default: {defaults.transform_threads})",
        )
        parser.add_argument("--passthrough", nargs="*", help="extra columns sent unchanged (e.g. a row id)")
        parser.add_argument(
            "--heartbeat-s",
            type=float,
            default=defaults.heartbeat_s,
            help="heartbeat interval to the dispatcher",
        )
        parser.add_argument(
            "--master-grace-s",
            type=float,
            default=defaults.master_grace_s,
            help="keep retrying an unreachable dispatcher this long (a job's master restarting)",
        )

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> DataExecutorOptions:
        return cls(
            spec=args.spec,
            dispatcher=args.dispatcher,
            name=args.name,
            token_file=args.token_file,
            host=args.host,
            port=args.port,
            window=args.window,
            batch_rows=args.batch_rows,
            transform_threads=args.transform_threads,
            passthrough=tuple(args.passthrough or ()),
            heartbeat_s=args.heartbeat_s,
            master_grace_s=args.master_grace_s,
        )
