"""Building SeaweedFS's ``weed`` (Apache-2.0) from the Go module proxy, once, into the provider's cache.

Why this way: the object-store tests need a real S3-compatible server, and SeaweedFS publishes every
line of its source on the Go module proxy. ``go install <module>/weed@<version>`` is refused (its
go.mod has ``replace`` directives), so the module's source is copied out of the module cache and
built as the main module.

The binary lands in ``<cache>/seaweedfs-<version>/bin/weed`` next to a stamp (a hash of the module,
the version and the build flags). A later call whose stamp matches only stats one file, so it needs
neither Go nor the network. The build runs in a temporary directory renamed into place under a file
lock, so an interrupted or concurrent build never leaves a binary that looks complete.
``build-times.json`` keeps the wall seconds of each build (download, compile) for the docs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from airflow_provider_primus.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
LDFLAGS = "-s -w"
STAMP = "stamp"
BUILD_TIMES = "build-times.json"
_BUILD_HISTORY = 10


class SeaweedBuildError(RuntimeError):
    """The binary is missing and could not be built; the message carries the tail of Go's output."""


class GoNotFoundError(SeaweedBuildError):
    """No ``go`` on PATH and nothing cached: the one case where callers (tests) may skip."""


def build_stamp(version: str = SEAWEEDFS_VERSION) -> str:
    """What decides the binary's bytes; a change in any of it rebuilds."""
    digest = hashlib.sha256()
    for part in (SEAWEEDFS_MODULE, version, LDFLAGS, "-trimpath", "./weed"):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def binary_path(cache_dir: Path | None = None, version: str = SEAWEEDFS_VERSION) -> Path:
    return (cache_dir or default_cache_dir()) / f"seaweedfs-{version}" / "bin" / "weed"


def _is_complete(weed: Path, stamp: str) -> bool:
    try:
        if (weed.parent.parent / STAMP).read_text().strip() != stamp:
            return False
    except OSError:
        return False
    return weed.is_file() and os.access(weed, os.X_OK)


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """One builder per cache directory: a second caller waits, then finds the stamp written."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # GOTOOLCHAIN=local: never let a go.mod line download another toolchain behind the user's back.
    env["GOTOOLCHAIN"] = "local"
    for name in ("GOBIN", "GOOS", "GOARCH"):
        env.pop(name, None)
    # -mod=mod: go may complete go.sum in our copy instead of refusing to build.
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod"])
    return env


def _run_go(cmd: list[str], *, cwd: Path, env: dict[str, str], what: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise SeaweedBuildError(f"{what} failed (exit {proc.returncode}, `{' '.join(cmd)}`):\n{tail}")
    return elapsed, proc.stdout


def _record_build_times(home: Path, entry: dict[str, object]) -> None:
    path = home / BUILD_TIMES
    try:
        history = json.loads(path.read_text()).get("builds", [])
    except (OSError, ValueError, AttributeError):
        history = []
    history = [*history, entry][-_BUILD_HISTORY:]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"builds": history}, indent=2) + "\n")
    tmp.replace(path)


def ensure_seaweedfs(
    cache_dir: Path | None = None, *, version: str = SEAWEEDFS_VERSION, go: str | None = None
) -> Path:
    """The ``weed`` binary of SeaweedFS ``version``, built on first use.

    Cold: about 2 minutes of module downloads (~0.9 GB into Go's module cache, ``GOMODCACHE``) and
    several minutes of compiling on 2 cores; a matching stamp returns at once.
    """
    weed = binary_path(cache_dir, version)
    home = weed.parent.parent
    stamp = build_stamp(version)
    if _is_complete(weed, stamp):
        return weed
    go_path = shutil.which("go") if go is None else go
    if not go_path:
        raise GoNotFoundError(
            f"the S3 test server (SeaweedFS {version}) is built from source once and needs Go "
            "(>= 1.25) on PATH; fix: install Go from https://go.dev/dl/ and rerun scripts/test.sh"
        )
    with _locked(home):
        if _is_complete(weed, stamp):  # built by whoever held the lock before us
            return weed
        env = _go_env()
        log.info("building SeaweedFS %s with Go into %s (once; minutes with a cold Go cache)", version, weed)
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            work = Path(tmp)
            # Outside any module: `go mod download` of one module version into the module cache.
            fetch_s, out = _run_go(
                [go_path, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{version}"],
                cwd=work,
                env=env,
                what=f"downloading {SEAWEEDFS_MODULE}@{version}",
            )
            module_dir = Path(json.loads(out)["Dir"])
            src = work / "src"
            shutil.copytree(module_dir, src, symlinks=True)
            for root, dirs, files in os.walk(src):  # the module cache is read-only
                for name in (*dirs, *files):
                    path = Path(root) / name
                    if not path.is_symlink():
                        path.chmod(path.stat().st_mode | 0o200)
            src.chmod(src.stat().st_mode | 0o200)
            deps_s, _ = _run_go(
                [go_path, "mod", "download"], cwd=src, env=env, what="downloading dependencies"
            )
            staged = work / "bin"
            staged.mkdir()
            build_s, _ = _run_go(
                [go_path, "build", "-trimpath", "-ldflags", LDFLAGS, "-o", str(staged / "weed"), "./weed"],
                cwd=src,
                env=env,
                what=f"building SeaweedFS {version}",
            )
            if not (staged / "weed").is_file():
                raise SeaweedBuildError(f"go reported success but weed is not in {staged}")
            target = weed.parent
            old = home / ".bin-old"
            if old.exists():
                shutil.rmtree(old)
            if target.exists():
                target.rename(old)
            staged.rename(target)
            if old.exists():
                shutil.rmtree(old)
        (home / STAMP).write_text(stamp + "\n")
        version_out = subprocess.run(
            [go_path, "version"], env=env, capture_output=True, text=True, check=False
        )
        _record_build_times(
            home,
            {
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "go": version_out.stdout.strip(),
                "cpus": os.cpu_count(),
                "download_s": round(fetch_s + deps_s, 1),
                "build_s": round(build_s, 1),
                "stamp": stamp[:16],
            },
        )
        log.info("built SeaweedFS in %.0fs (+%.0fs downloads)", build_s, fetch_s + deps_s)
    return weed
