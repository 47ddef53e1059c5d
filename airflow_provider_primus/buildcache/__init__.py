"""What every build the suite caches outside the clone shares: one builder per cache directory, a
stamp that says the artefacts are the ones asked for, Go's environment, a bounded build-time log.

The control plane and node binaries, the S3 server, the project's images and the YARN jars are all
built once into ``~/.cache/airflow-provider-primus`` and afterwards found by a stamp or a content
hash of what decides their bytes. The rules are the same for all of them, so they live here once,
below every layer that builds (``yarn/``, ``embedded/``). Where an artefact that the doctor checks
lives, and when it is complete, is here too (``kafka``, ``kube``): checking must not import the
builders.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "BUILD_TIMES",
    "find_go",
    "go_env",
    "locked",
    "record_build_time",
    "replace_dir",
    "run_go",
    "stamped",
]

BUILD_TIMES = "build-times.json"


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    """One builder per cache directory: a second caller waits, then finds the stamp written."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def stamped(stamp_file: Path, stamp: str, paths: Iterable[Path]) -> bool:
    """The stamp matches and every artefact is an executable file."""
    try:
        if stamp_file.read_text().strip() != stamp:
            return False
    except OSError:
        return False
    return all(path.is_file() and os.access(path, os.X_OK) for path in paths)


def find_go(go: str | None, error: type[Exception], what: str) -> str:
    """The Go toolchain to build ``what`` with, or ``error`` saying how to get one."""
    found = shutil.which("go") if go is None else go
    if not found:
        raise error(
            f"{what} is built from source once and needs Go (>= 1.25) on PATH; fix: install Go from "
            "https://go.dev/dl/ and rerun scripts/test.sh"
        )
    return found


def go_env(*, module_mode: bool = False) -> dict[str, str]:
    """The environment a build runs Go in. ``GOTOOLCHAIN=local``: never let a go.mod line download
    another toolchain behind the user's back; a user's ``-mod`` is for their own modules (with
    ``module_mode`` go may complete go.sum in our copy instead of refusing to build)."""
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = "local"
    for name in ("GOBIN", "GOOS", "GOARCH"):
        env.pop(name, None)
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join([*flags, *(["-mod=mod"] if module_mode else [])])
    return env


def run_go(
    cmd: list[str], *, cwd: Path, env: dict[str, str], what: str, error: type[Exception]
) -> tuple[float, str]:
    """Run a go command; its wall seconds and stdout, or ``error`` with the output's tail."""
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise error(f"building {what} failed (exit {proc.returncode}, `{' '.join(cmd)}`):\n{tail}")
    return elapsed, proc.stdout


def record_build_time(home: Path, entry: dict[str, object], keep: int = 10) -> None:
    """Append to ``home/build-times.json`` (the last ``keep`` builds): the docs' cold/warm figures."""
    path = home / BUILD_TIMES
    try:
        history = json.loads(path.read_text()).get("builds", [])
    except (OSError, ValueError, AttributeError):
        history = []
    history = [*history, entry][-keep:]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"builds": history}, indent=2) + "\n")
    tmp.replace(path)


def replace_dir(staged: Path, target: Path) -> None:
    """Swap ``staged`` in for ``target`` so a reader never sees a half-written directory."""
    old = target.with_name(f".{target.name}-old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    staged.rename(target)
    if old.exists():
        shutil.rmtree(old)
