"""Building the control plane's binaries from source with Go, once, into the provider's cache.

Why from source: Kubernetes publishes no kube-apiserver/kube-scheduler/etcd archives on any package
registry we can reach, but every line of their source is on the Go module proxy. The small module in
``controlplane/`` pins each ``k8s.io`` staging module to the release (``replace`` lines) and names
the two commands as ``tool`` dependencies; ``cmd/etcd`` wraps etcd's own ``etcdmain``. kwok is a
plain ``go install`` of its released module.

The result lands in ``<cache>/kube-<version>/bin`` with a stamp (both described in
``buildcache/kube.py``, which the doctor reads): a hash of everything that decides
the bytes (go.mod, go.sum, the etcd wrapper, the kwok version, the link flags). A later call whose
stamp matches only stats four files, so it needs neither Go nor the network. Builds go to a
temporary directory that is renamed into place, under a file lock, so an interrupted or concurrent
build never leaves a half-written ``bin`` that looks complete. ``build-times.json`` keeps the wall
seconds of each build step (cold vs warm Go cache) for the docs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
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
from airflow_provider_primus.buildcache.kube import (
    KUBE_VERSION,
    KWOK_LDFLAGS,
    KWOK_VERSION,
    STAMP,
    KubeBinaries,
    binaries_in,
    build_stamp,
    is_complete,
    kube_ldflags,
    module_source,
)
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir as default_cache_dir

__all__ = [
    "KUBE_VERSION",
    "KWOK_VERSION",
    "GoNotFoundError",
    "KubeBinaries",
    "KubeBinariesError",
    "NodeBinaries",
    "binaries_in",
    "build_stamp",
    "ensure_binaries",
    "ensure_node_binaries",
    "node_binaries_in",
    "node_build_stamp",
]

log = logging.getLogger(__name__)

KWOK_PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"
KUBE_PACKAGES = ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-scheduler", "./cmd/etcd")
# A real node's components: only the real-node tests and `primus cluster up` need them, so they are
# built (and stamped) on their own and the control-plane tests never wait for them.
NODE_PACKAGES = ("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-controller-manager")
NODE_BIN = "node-bin"
NODE_STAMP = "node-stamp"


class KubeBinariesError(PrimusError):
    """The binaries are missing and could not be built; the message carries the tail of Go's output."""


class GoNotFoundError(KubeBinariesError):
    """No ``go`` on PATH and nothing cached: the one case where callers (tests) may skip."""


@dataclass(frozen=True)
class NodeBinaries:
    version: str
    kubelet: Path
    controller_manager: Path

    def all(self) -> tuple[Path, Path]:
        return (self.kubelet, self.controller_manager)


def node_binaries_in(home: Path, version: str = KUBE_VERSION) -> NodeBinaries:
    bin_dir = home / NODE_BIN
    return NodeBinaries(version, bin_dir / "kubelet", bin_dir / "kube-controller-manager")


def node_build_stamp(version: str = KUBE_VERSION) -> str:
    """The same module files and link flags as the control plane's, plus the node's packages."""
    digest = hashlib.sha256()
    for name, data in sorted(module_source().items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for part in (version, kube_ldflags(version), *NODE_PACKAGES):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _write_module(src: Path) -> None:
    for name, data in module_source().items():
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _go_version(go: str, env: dict[str, str]) -> str:
    proc = subprocess.run([go, "version"], env=env, capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def ensure_binaries(
    cache_dir: Path | None = None,
    *,
    version: str = KUBE_VERSION,
    kwok_version: str = KWOK_VERSION,
    go: str | None = None,
) -> KubeBinaries:
    """kube-apiserver, kube-scheduler, etcd and kwok for ``version``, built on first use.

    ``cache_dir`` is the provider's cache root (``PRIMUS_CACHE_DIR``, default
    ``~/.cache/airflow-provider-primus``); the binaries go to ``<cache_dir>/kube-<version>/bin``.
    A cold build takes minutes (all of Kubernetes compiles); a matching stamp returns at once.
    """
    home = (cache_dir or default_cache_dir()) / f"kube-{version}"
    bins = binaries_in(home, version, kwok_version)
    stamp = build_stamp(version, kwok_version)
    if is_complete(bins, stamp):
        return bins
    go_path = find_go(go, GoNotFoundError, f"the Kubernetes control plane ({version})")
    with locked(home):
        if is_complete(bins, stamp):  # built by whoever held the lock before us
            return bins
        env = go_env()
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            work = Path(tmp)
            src = work / "src"
            _write_module(src)
            staged = work / "bin"
            staged.mkdir()
            # -mod=mod: go may complete go.sum in the cache's copy instead of refusing to build.
            log.info(
                "building kube-apiserver, kube-scheduler and etcd %s and kwok %s with Go into %s "
                "(once; minutes with a cold Go build cache)",
                version,
                kwok_version,
                bins.apiserver.parent,
            )
            kube_s, _ = run_go(
                [go_path, "build", "-trimpath", "-ldflags", kube_ldflags(version), "-o", f"{staged}/",
                 *KUBE_PACKAGES],
                cwd=src,
                env=go_env(module_mode=True),
                what=f"kube-apiserver, kube-scheduler and etcd {version}",
                error=KubeBinariesError,
            )  # fmt: skip
            # `go install pkg@version` builds outside any module: run it from the empty work dir.
            kwok_s, _ = run_go(
                [go_path, "install", "-trimpath", "-ldflags", KWOK_LDFLAGS, f"{KWOK_PACKAGE}@{kwok_version}"],
                cwd=work,
                env={**env, "GOBIN": str(staged)},
                what=f"kwok {kwok_version}",
                error=KubeBinariesError,
            )
            for path in bins.all():
                if not (staged / path.name).is_file():
                    raise KubeBinariesError(f"go reported success but {path.name} is not in {staged}")
            replace_dir(staged, bins.apiserver.parent)
        (home / STAMP).write_text(stamp + "\n")
        record_build_time(
            home,
            {
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "go": _go_version(go_path, env),
                "cpus": os.cpu_count(),
                "kube_apiserver_scheduler_etcd_s": round(kube_s, 1),
                "kwok_s": round(kwok_s, 1),
                "stamp": stamp[:16],
            },
        )
        log.info("built in %.0fs (control plane) + %.0fs (kwok)", kube_s, kwok_s)
    return bins


def ensure_node_binaries(
    cache_dir: Path | None = None, *, version: str = KUBE_VERSION, go: str | None = None
) -> NodeBinaries:
    """kubelet and kube-controller-manager for ``version``, from the control plane's module (same
    ``replace`` lines, so the node is the very release the API server is), into
    ``<cache_dir>/kube-<version>/node-bin``. About a minute with a warm Go cache; a stamp check after."""
    home = (cache_dir or default_cache_dir()) / f"kube-{version}"
    bins = node_binaries_in(home, version)
    stamp = node_build_stamp(version)
    if stamped(home / NODE_STAMP, stamp, bins.all()):
        return bins
    go_path = find_go(go, GoNotFoundError, f"the kubelet and kube-controller-manager ({version})")
    with locked(home):
        if stamped(home / NODE_STAMP, stamp, bins.all()):
            return bins
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-node-") as tmp:
            src, staged = Path(tmp) / "src", Path(tmp) / NODE_BIN
            _write_module(src)
            staged.mkdir()
            log.info(
                "building kubelet and kube-controller-manager %s with Go into %s (once)", version, staged
            )
            node_s, _ = run_go(
                [go_path, "build", "-trimpath", "-ldflags", kube_ldflags(version), "-o", f"{staged}/",
                 *NODE_PACKAGES],
                cwd=src,
                env=go_env(module_mode=True),
                what=f"kubelet and kube-controller-manager {version}",
                error=KubeBinariesError,
            )  # fmt: skip
            for path in bins.all():
                if not (staged / path.name).is_file():
                    raise KubeBinariesError(f"go reported success but {path.name} is not in {staged}")
            replace_dir(staged, bins.kubelet.parent)
        (home / NODE_STAMP).write_text(stamp + "\n")
        record_build_time(
            home,
            {
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "go": _go_version(go_path, go_env()),
                "cpus": os.cpu_count(),
                "kubelet_controller_manager_s": round(node_s, 1),
                "stamp": stamp[:16],
            },
        )
        log.info("built the node's binaries in %.0fs", node_s)
    return bins
