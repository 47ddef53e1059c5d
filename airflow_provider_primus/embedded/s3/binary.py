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

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_provider_primus.buildcache import (
    find_go,
    go_env,
    locked,
    record_build_time,
    replace_dir,
    run_go,
    stamped,
)
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
LDFLAGS = "-s -w"
STAMP = "stamp"


class SeaweedBuildError(PrimusError):
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
    return stamped(weed.parent.parent / STAMP, stamp, [weed])


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
    go_path = find_go(go, GoNotFoundError, f"the S3 test server (SeaweedFS {version})")
    with locked(home):
        if _is_complete(weed, stamp):  # built by whoever held the lock before us
            return weed
        env = go_env(module_mode=True)
        log.info("building SeaweedFS %s with Go into %s (once; minutes with a cold Go cache)", version, weed)
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            work = Path(tmp)
            # Outside any module: `go mod download` of one module version into the module cache.
            fetch_s, out = run_go(
                [go_path, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{version}"],
                cwd=work,
                env=env,
                what=f"downloading {SEAWEEDFS_MODULE}@{version}",
                error=SeaweedBuildError,
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
            deps_s, _ = run_go(
                [go_path, "mod", "download"],
                cwd=src,
                env=env,
                what="downloading dependencies",
                error=SeaweedBuildError,
            )
            staged = work / "bin"
            staged.mkdir()
            build_s, _ = run_go(
                [go_path, "build", "-trimpath", "-ldflags", LDFLAGS, "-o", str(staged / "weed"), "./weed"],
                cwd=src,
                env=env,
                what=f"SeaweedFS {version}",
                error=SeaweedBuildError,
            )
            if not (staged / "weed").is_file():
                raise SeaweedBuildError(f"go reported success but weed is not in {staged}")
            replace_dir(staged, weed.parent)
        (home / STAMP).write_text(stamp + "\n")
        version_out = subprocess.run(
            [go_path, "version"], env=env, capture_output=True, text=True, check=False
        )
        record_build_time(
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
