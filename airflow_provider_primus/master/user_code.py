"""The user's code a job names, checked at submit before anything is launched.

A local job may run its executors in another interpreter (a virtual environment with the user's
packages) and with extra folders on their import path; a python model must build and run in exactly
that environment. Both are checked here, at ``primus validate`` and at submit, so a missing
interpreter or a model that does not import is a named error up front, not a trainer that fails
minutes later on a busy machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.errors import SpecIssue
from airflow_provider_primus.contracts.job import PrimusJob
from airflow_provider_primus.contracts.training import PrimusTraining

__all__ = ["ExecutorPython", "executor_python", "user_model_issues"]

PROBE_TIMEOUT_S = 60.0
PROVIDER = "airflow_provider_primus"


@dataclass(frozen=True)
class ExecutorPython:
    """The interpreter (None: the master's) and the extra import paths of a job's executors."""

    python: str | None = None
    paths: tuple[str, ...] = field(default_factory=tuple)


def executor_python(job: PrimusJob, base: Path) -> tuple[ExecutorPython, list[SpecIssue]]:
    """``backend.local`` with its paths made absolute (relative to the job file), and what is wrong
    with it: an interpreter that is missing, not executable or without this provider, a folder that
    is not there."""
    local = job.spec.backend.local
    if local is None or job.spec.backend.type != "local":
        return ExecutorPython(), []
    issues: list[SpecIssue] = []
    paths = []
    for i, raw in enumerate(local.paths):
        path = (base / raw).resolve()
        paths.append(str(path))
        if not path.is_dir():
            issues.append(SpecIssue(f"spec.backend.local.paths[{i}]", f"{str(path)!r} is not a folder"))
    python = None
    if local.python is not None:
        # A name is looked up on PATH, a path is the job file's; symlinks are kept (a virtual
        # environment's python is a link whose target has none of its packages).
        found = shutil.which(local.python) if "/" not in local.python else None
        python = found or os.path.abspath(base / local.python)
        reason = _unusable(python, paths)
        if reason:
            issues.append(SpecIssue("spec.backend.local.python", reason))
    return ExecutorPython(python, tuple(paths)), issues


def _unusable(python: str, paths: list[str]) -> str | None:
    """Why ``python`` cannot run this job's executors, or None."""
    if not Path(python).is_file():
        return f"{python!r} does not exist"
    if not os.access(python, os.X_OK):
        return f"{python!r} is not executable"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).strip(os.pathsep),
    }
    try:
        done = subprocess.run(
            [python, "-c", f"import {PROVIDER}"], capture_output=True, text=True, env=env,
            timeout=PROBE_TIMEOUT_S, check=False, cwd="/",  # not this folder: it may hold the provider
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python!r} does not run: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"{python!r} cannot import {PROVIDER} (install it into that environment): {last}"
    return None


def user_model_issues(training: PrimusTraining, data: PrimusData, where: ExecutorPython) -> list[SpecIssue]:
    """A python model built and run once on a synthetic batch, in a child process of the executors'
    interpreter with their import paths: an entrypoint that does not import or breaks the protocol
    there is refused by name."""
    model = training.spec.model
    if model.type != "python":
        return []
    # torch is imported only for a job that trains a python model.
    from airflow_provider_primus.training.entrypoint import EntrypointError, check_in_child
    from airflow_provider_primus.training.user_model import feature_schema

    assert model.entrypoint is not None  # the contract requires it for this type
    try:
        check_in_child(
            model.entrypoint, feature_schema(training, data), model.options,
            python=where.python, paths=[Path(p) for p in where.paths],
        )  # fmt: skip
    except EntrypointError as exc:
        return [SpecIssue("spec.training", str(exc))]
    return []
