"""The user's code a job names, checked at submit before anything is launched.

A local job may run its executors in another interpreter (a virtual environment with the user's
packages) and with extra folders on their import path; a python model must build and run in exactly
that environment. Both are checked here, at ``primus validate`` and at submit, so a missing
interpreter or a model that does not import is a named error up front, not a trainer that fails
minutes later on a busy machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_primus.contracts.data import PrimusData
from airflow_provider_primus.contracts.errors import SpecIssue
from airflow_provider_primus.contracts.job import PrimusJob
from airflow_provider_primus.contracts.training import PrimusTraining
from airflow_provider_primus.data.user_transform_check import check_in_child, python_functions

__all__ = ["ExecutorPython", "executor_python", "user_model_issues", "user_transform_issues", "wheel_issue"]

PROBE_TIMEOUT_S = 60.0
PROVIDER = "airflow_provider_primus"


@dataclass(frozen=True)
class ExecutorPython:
    """The interpreter (None: the master's) and the extra import paths of a job's executors, and
    where the job document says them (``backend.<section>.<key>``)."""

    python: str | None = None
    paths: tuple[str, ...] = field(default_factory=tuple)
    section: str | None = None
    key: str = "paths"


def executor_python(job: PrimusJob, base: Path) -> tuple[ExecutorPython, list[SpecIssue]]:
    """``backend.local`` (an interpreter, folders or wheels) or ``backend.yarn.wheels`` with their
    paths made absolute (relative to the job file), and what is wrong with them: an interpreter that
    is missing, not executable or without this provider, a folder that is not there, a file that is
    not a pure-Python wheel."""
    backend = job.spec.backend
    if backend.type == "local" and backend.local is not None:
        section, key, raws = "local", "paths", backend.local.paths
    elif backend.type == "yarn" and backend.yarn is not None and backend.yarn.wheels:
        section, key, raws = "yarn", "wheels", backend.yarn.wheels
    else:
        return ExecutorPython(), []
    issues: list[SpecIssue] = []
    paths = []
    for i, raw in enumerate(raws):
        path = Path(os.path.abspath(base / raw))
        paths.append(str(path))
        wheel = path.suffix == ".whl" or key == "wheels"
        reason = wheel_issue(path) if wheel else (None if path.is_dir() else f"{str(path)!r} is not a folder")
        if reason:
            issues.append(SpecIssue(f"spec.backend.{section}.{key}[{i}]", reason))
    python = None
    if section == "local" and backend.local is not None and backend.local.python is not None:
        # A name is looked up on PATH, a path is the job file's; symlinks are kept (a virtual
        # environment's python is a link whose target has none of its packages).
        given = backend.local.python
        python = (shutil.which(given) if "/" not in given else None) or os.path.abspath(base / given)
        reason = _unusable(python, paths)
        if reason:
            issues.append(SpecIssue("spec.backend.local.python", reason))
    return ExecutorPython(python, tuple(paths), section, key), issues


def wheel_issue(path: Path) -> str | None:
    """Why ``path`` cannot go on an import path as a wheel, or None. Only a pure-Python wheel is
    importable from its zip (zipimport); one with compiled code must be installed instead."""
    if not path.is_file():
        return f"{str(path)!r} is not a file"
    if path.suffix != ".whl":
        return f"{path.name!r} is not a wheel (.whl)"
    try:
        with zipfile.ZipFile(path) as archive:
            metadata = [n for n in archive.namelist() if n.endswith(".dist-info/WHEEL")]
            text = archive.read(metadata[0]).decode() if metadata else ""
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as exc:
        return f"{path.name!r} is not a readable wheel: {exc}"
    if not text:
        return f"{path.name!r} has no .dist-info/WHEEL: not a wheel"
    if "root-is-purelib: true" not in text.lower():
        return (
            f"{path.name!r} holds compiled code (Root-Is-Purelib is not true): a wheel on the import "
            "path must be pure Python; install it into the executors' environment instead"
        )
    return None


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


def user_model_issues(
    training: PrimusTraining, data: PrimusData, where: ExecutorPython, *, in_image: bool = False
) -> list[SpecIssue]:
    """A python model built and run once on a synthetic batch, in a child process of the executors'
    interpreter with their import paths: an entrypoint that does not import or breaks the protocol
    there is refused by name. ``in_image``: the executors' Python is an image's (Kubernetes), which
    this machine need not have: the model is checked here when its package is importable here, else
    by the trainer's first step (a terminal error naming the field)."""
    model = training.spec.model
    if model.type != "python":
        return []
    if (
        in_image
        and model.entrypoint
        and importlib.util.find_spec(model.entrypoint.split(".")[0].split(":")[0]) is None
    ):
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


def user_transform_issues(
    data: PrimusData, where: ExecutorPython, *, in_image: bool = False
) -> list[SpecIssue]:
    """The data document's python transform functions imported in a child process of the executors'
    interpreter with their import paths (data executors and trainers both run them): one that does
    not import, or is not callable, is refused by its field. ``in_image``: as for python models, a
    function whose package is not importable here is left to the executors (the image's)."""
    functions = python_functions(data)
    if in_image:
        functions = [
            (f, fn) for f, fn in functions if importlib.util.find_spec(fn.split(".")[0].split(":")[0])
        ]
    found = check_in_child(functions, python=where.python, paths=where.paths)
    return [SpecIssue("spec.data", f"{field}: {reason}") for field, reason in found]
