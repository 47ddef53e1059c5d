"""How an executor's thread pools follow its allotment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airflow_provider_primus.resources.allotment import IDLE_THREADS_ENV, passive_idle_threads, thread_env
from airflow_provider_primus.resources.backend import Allotment


def test_pools_are_sized_to_whole_cores() -> None:
    assert thread_env(Allotment(1.5, 2**30)) == dict.fromkeys(
        ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "2"
    )
    assert thread_env(Allotment(0.25, 2**30))["OMP_NUM_THREADS"] == "1"


def test_idle_threads_sleep_unless_the_environment_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    passive_idle_threads()
    assert os.environ["OMP_WAIT_POLICY"] == IDLE_THREADS_ENV["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    passive_idle_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_the_trainer_command_can_set_it_before_torch_loads() -> None:
    """``primus train`` sets it first thing in its handler; that only works while nothing before it
    (the CLI, the spec modules) has loaded torch, whose OpenMP runtime reads it once, at load."""
    code = (
        "import sys\n"
        "import airflow_provider_primus.cli.main, airflow_provider_primus.cli.train\n"
        "import airflow_provider_primus.contracts, airflow_provider_primus.contracts.loader\n"
        "import airflow_provider_primus.contracts.training\n"
        "sys.exit(1 if 'torch' in sys.modules else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
