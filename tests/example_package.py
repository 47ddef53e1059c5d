"""The example two-tower package (docs/examples/two_tower) as its author ships it: a wheel built from
a copy of its project (a build in place would leave build/ and *.egg-info beside the sources)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1] / "docs" / "examples" / "two_tower"
DISTRIBUTION = {"name": "two-tower-example", "version": "0.1.0"}


def example_project(root: Path) -> Path:
    """A copy of the example's project (pyproject, sources, Dockerfile) under ``root``."""
    project = root / "two_tower"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"))
    return project


def build_wheel(project: Path) -> Path:
    """``pip wheel`` of the project into its ``dist/`` (offline: the build backend is installed here)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(project),
         "-w", str(project / "dist")],
        check=True, timeout=300,
    )  # fmt: skip
    [wheel] = (project / "dist").glob("*.whl")
    return wheel
