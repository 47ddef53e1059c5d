"""``scripts/gpu_bench.py``: one JSON line where it can measure, a clear refusal where it cannot."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from tests.conftest import REPO

SCRIPT = str(REPO / "scripts" / "gpu_bench.py")


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, check=False, timeout=600
    )


def test_on_the_gpu_or_a_clear_message_without_one() -> None:
    result = bench("--steps", "5", "--batch-size", "256")
    if torch.cuda.is_available():
        assert result.returncode == 0, result.stderr
        line = json.loads(result.stdout)
        assert (
            line["steps"] == 5 and line["steps_per_s"] > 0 and line["placement"]["dense"].startswith("cuda")
        )
    else:
        assert result.returncode == 2 and result.stdout == ""
        assert "no GPU" in result.stderr and "nothing to measure" in result.stderr


def test_the_cpu_baseline_is_one_json_line() -> None:
    result = bench("--device", "cpu", "--steps", "5", "--batch-size", "256")
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    figures = json.loads(line)
    assert figures["steps"] == 5 and figures["rows_per_s"] > 0
    assert figures["placement"] == {
        "dense": "cpu",
        "embeddings": "cpu",
        "reason": "no GPU: the whole model on the host",
    }
