"""The long commands on a terminal and off it, as real processes.

On a pseudo-terminal (stdout and stderr both on it, as in a person's shell) each draws its progress;
with ``--json`` the terminal receives exactly one JSON document and nothing else; with pipes the
output is what scripts always got: one JSON line on stdout and no progress on stderr.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_plan import spec_file
from tests.conftest import venv_bin
from tests.data.conftest import T0
from tests.master.conftest import JobWorld

pytestmark = pytest.mark.timeout(300)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def on_pty(*args: str, timeout_s: float = 240) -> tuple[int, str]:
    """``primus ARGS`` with stdin, stdout and stderr on a fresh pseudo-terminal; its exit code and
    everything it wrote there (the terminal's CR LF turned back into LF)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    for var in ("NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"):
        env.pop(var, None)
    proc = subprocess.Popen([venv_bin("primus"), *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def one_json_document(output: str) -> dict[str, Any]:
    """The output is exactly one JSON document: no progress, no escape codes, no other line."""
    assert "\x1b" not in output, output
    assert len(output.strip().splitlines()) == 1, output
    document: dict[str, Any] = json.loads(output)
    return document


def drawn(output: str) -> str:
    """What a terminal showed, escape codes removed."""
    return ANSI.sub("", output)


def gen_args(out: Path) -> list[str]:
    return ["gen", "--out", str(out), "--history-days", "3", "--stream-days", "0", "--rows-per-day", "300"]


def plan_args(tmp_path: Path) -> list[str]:
    """A files-only world of three hourly partitions (the planner lists Kafka too when named)."""
    window = ["--start", T0.isoformat(), "--end", (T0 + timedelta(hours=3)).isoformat()]
    return ["plan", str(spec_file(tmp_path)), *window, "--no-cache"]


def test_gen_and_plan_draw_progress_on_a_terminal(tmp_path: Path) -> None:
    code, output = on_pty(*gen_args(tmp_path / "world"))
    assert code == 0, output
    shown = drawn(output)
    assert "history days" in shown and "3/3" in shown  # the bar, at its end
    summary = json.loads(shown.strip().splitlines()[-1])  # then the usual summary
    assert summary["history_files"] == 3

    code, output = on_pty(*plan_args(tmp_path))
    assert code == 0, output
    shown = drawn(output)
    assert "planning" in shown and "3/3" in shown and "3 tasks" in shown
    assert json.loads(shown.strip().splitlines()[-1])["partitions"] == 3


def test_gen_and_plan_with_json_write_one_document_and_nothing_else(tmp_path: Path) -> None:
    code, output = on_pty(*gen_args(tmp_path / "world"), "--json")
    assert code == 0, output
    assert one_json_document(output)["history_files"] == 3
    code, output = on_pty(*plan_args(tmp_path), "--json")
    assert code == 0, output
    assert one_json_document(output)["partitions"] == 3


def test_off_a_terminal_the_output_is_what_it_always_was(tmp_path: Path) -> None:
    for args in (gen_args(tmp_path / "world"), plan_args(tmp_path)):
        result = subprocess.run(
            [venv_bin("primus"), *args], check=False, capture_output=True, text=True, timeout=240
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and len(result.stdout.splitlines()) == 1
        json.loads(result.stdout)


def test_train_draws_progress_on_a_terminal_and_is_quiet_with_json(job_world: JobWorld) -> None:
    def train(*extra: str) -> tuple[int, str]:
        workdir = job_world.root / f"train{len(extra)}"
        return on_pty(
            "train",
            str(job_world.data_path),
            "--training",
            str(job_world.training_path),
            "--workdir",
            str(workdir),
            "--max-steps",
            "40",
            *extra,
        )

    code, output = train()
    assert code == 0, output
    shown = drawn(output)
    assert "primus train: mode batch" in shown and "training" in shown and "40/40" in shown
    code, output = train("--json")
    assert code == 0, output
    assert one_json_document(output)["steps"] == 40


def test_run_draws_the_jobs_progress_and_is_quiet_with_json(job_world: JobWorld) -> None:
    code, output = on_pty("run", str(job_world.job("drawn")))
    assert code == 0, output
    shown = drawn(output)
    assert "job drawn" in shown and "rows acked" in shown
    assert json.loads(shown.strip().splitlines()[-1])["phase"] == "Succeeded"
    code, output = on_pty("run", str(job_world.job("quiet")), "--json")
    assert code == 0, output
    final = one_json_document(output)
    assert final["phase"] == "Succeeded" and final["progress"]["acked_rows"] == job_world.rows


def test_bench_draws_its_stages_on_a_terminal_and_is_quiet_with_json(tmp_path: Path) -> None:
    args = ["bench", "plan", "--days", "1", "--files", "1", "--delay-ms", "1", "--local-files", "50"]
    args += ["--workdir", str(tmp_path), "--parallel-runs", "1", "--incremental-runs", "1"]
    code, output = on_pty(*args)
    assert code == 0, output
    shown = drawn(output)
    assert "bench plan" in shown and "tasks/s on a local tree of 50 files" in shown  # the last stage
    assert json.loads(shown.strip().splitlines()[-1])["partitions"] == 48
    code, output = on_pty(*args, "--json")
    assert code == 0, output
    assert one_json_document(output)["partitions"] == 48
