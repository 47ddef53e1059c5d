"""Starting a data executor process (``primus serve-data``) the way every caller must: token in the
environment (never on the command line), tied to its launcher's life, ready only once it printed its
location. The local backend, the benchmark and the tests share this one launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.credentials import TOKEN_ENV
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.process import primus_command, stop_process_group, tied_to_launcher


class ExecutorStartError(PrimusError):
    pass


@dataclass
class ExecutorProcess:
    name: str
    proc: subprocess.Popen[str]
    location: str

    def kill(self) -> None:
        """SIGKILL, no clean-up: what a crashed or OOM-killed executor looks like."""
        self.proc.kill()
        self.proc.wait()

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            stop_process_group(self.proc.pid, child=self.proc, grace_s=grace_s)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def launch_executor(
    name: str,
    dispatcher: str,
    spec_path: Path,
    token: str,
    *,
    window: int = 8,
    batch_rows: int = 8192,
    heartbeat_s: float | None = None,
    passthrough: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> ExecutorProcess:
    """``env``: more environment (the job's TLS folder, object-store key variables)."""
    primus = Path(sys.executable).parent / "primus"
    command = [str(primus)] if primus.exists() else primus_command()
    command += [
        "serve-data",
        str(spec_path),
        "--dispatcher",
        dispatcher,
        "--name",
        name,
        "--window",
        str(window),
        "--batch-rows",
        str(batch_rows),
    ]
    if heartbeat_s is not None:
        command += ["--heartbeat-s", str(heartbeat_s)]
    if passthrough:
        command += ["--passthrough", *passthrough]
    proc = subprocess.Popen(
        tied_to_launcher(command),
        env={**os.environ, **(env or {}), TOKEN_ENV: token},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise ExecutorStartError(f"data executor {name} did not start (exit {proc.wait()})")
    return ExecutorProcess(name, proc, json.loads(line)["location"])
