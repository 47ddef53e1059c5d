"""Building the control plane's binaries from source with Go, once, into the provider's cache.

Why from source: Kubernetes publishes no kube-apiserver/kube-scheduler/etcd archives on any package
registry we can reach, but every line of their source is on the Go module proxy. The small module in
``controlplane/`` pins each ``k8s.io`` staging module to the release (``replace`` lines) and names
the two commands as ``tool`` dependencies; ``cmd/etcd`` wraps etcd's own ``etcdmain``. kwok is a
plain ``go install`` of its released module.

The result lands in ``<cache>/kube-<version>/bin`` with a stamp: a hash of everything that decides
the bytes (go.mod, go.sum, the etcd wrapper, the kwok version, the link flags). A later call whose
stamp matches only stats four files, so it needs neither Go nor the network. Builds go to a
temporary directory that is renamed into place, under a file lock, so an interrupted or concurrent
build never leaves a half-written ``bin`` that looks complete. ``build-times.json`` keeps the wall
seconds of each build step (cold vs warm Go cache) for the docs.
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
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airflow_provider_primus.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

KUBE_VERSION = "v1.35.4"
KWOK_VERSION = "v0.8.0"
KWOK_PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"
KUBE_PACKAGES = ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-scheduler", "./cmd/etcd")
# A real node's components: only the real-node tests and `primus cluster up` need them, so they are
# built (and stamped) on their own and the control-plane tests never wait for them.
NODE_PACKAGES = ("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-controller-manager")
NODE_BIN = "node-bin"
NODE_STAMP = "node-stamp"
# The module files copied into the cache; the etcd wrapper is the only source of our own.
MODULE_FILES = ("go.mod", "go.sum", "cmd/etcd/main.go")
STAMP = "stamp"
BUILD_TIMES = "build-times.json"
_BUILD_HISTORY = 10


def _kube_ldflags(version: str) -> str:
    """``-s -w`` strips symbols (about 30% smaller); the ``-X`` lines make ``/version`` and the
    components' compatibility checks see the real release instead of ``v0.0.0-master``."""
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return f"-s -w -X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"


KWOK_LDFLAGS = "-s -w"


class KubeBinariesError(RuntimeError):
    """The binaries are missing and could not be built; the message carries the tail of Go's output."""


class GoNotFoundError(KubeBinariesError):
    """No ``go`` on PATH and nothing cached: the one case where callers (tests) may skip."""


@dataclass(frozen=True)
class KubeBinaries:
    version: str
    kwok_version: str
    home: Path
    apiserver: Path
    scheduler: Path
    etcd: Path
    kwok: Path

    def all(self) -> tuple[Path, Path, Path, Path]:
        return (self.apiserver, self.scheduler, self.etcd, self.kwok)


def binaries_in(home: Path, version: str = KUBE_VERSION, kwok_version: str = KWOK_VERSION) -> KubeBinaries:
    bin_dir = home / "bin"
    return KubeBinaries(
        version=version,
        kwok_version=kwok_version,
        home=home,
        apiserver=bin_dir / "kube-apiserver",
        scheduler=bin_dir / "kube-scheduler",
        etcd=bin_dir / "etcd",
        kwok=bin_dir / "kwok",
    )


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


def _module_source() -> dict[str, bytes]:
    root = resources.files(__package__).joinpath("controlplane")
    return {name: root.joinpath(name).read_bytes() for name in MODULE_FILES}


def build_stamp(version: str = KUBE_VERSION, kwok_version: str = KWOK_VERSION) -> str:
    """What decides the binaries' bytes; a change in any of it rebuilds."""
    digest = hashlib.sha256()
    for name, data in sorted(_module_source().items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for part in (version, kwok_version, _kube_ldflags(version), KWOK_LDFLAGS):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def node_build_stamp(version: str = KUBE_VERSION) -> str:
    """The same module files and link flags as the control plane's, plus the node's packages."""
    digest = hashlib.sha256()
    for name, data in sorted(_module_source().items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for part in (version, _kube_ldflags(version), *NODE_PACKAGES):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _stamped(stamp_file: Path, stamp: str, paths: tuple[Path, ...]) -> bool:
    try:
        if stamp_file.read_text().strip() != stamp:
            return False
    except OSError:
        return False
    return all(path.is_file() and os.access(path, os.X_OK) for path in paths)


def _is_complete(bins: KubeBinaries, stamp: str) -> bool:
    return _stamped(bins.home / STAMP, stamp, bins.all())


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


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    # GOTOOLCHAIN=local: never let a go.mod line trigger a toolchain download behind the user's back.
    env["GOTOOLCHAIN"] = "local"
    env.pop("GOBIN", None)
    env.pop("GOOS", None)
    env.pop("GOARCH", None)
    # A user's -mod setting is for their own modules; ours sets its own below.
    env["GOFLAGS"] = " ".join(f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod="))
    return env


def _run_go(cmd: list[str], *, cwd: Path, env: dict[str, str], what: str) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
        raise KubeBinariesError(
            f"building {what} failed (exit {proc.returncode}, `{' '.join(cmd)}`):\n{tail}"
        )
    return elapsed


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


def _replace_dir(staged: Path, target: Path) -> None:
    """Swap ``staged`` in for ``target`` so a reader never sees a half-written directory."""
    old = target.with_name(f".{target.name}-old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    staged.rename(target)
    if old.exists():
        shutil.rmtree(old)


def _write_module(src: Path) -> None:
    for name, data in _module_source().items():
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
    if _is_complete(bins, stamp):
        return bins
    go_path = shutil.which("go") if go is None else go
    if not go_path:
        raise GoNotFoundError(
            f"the Kubernetes control plane ({version}) is built from source once and needs Go "
            "(>= 1.25) on PATH; fix: install Go from https://go.dev/dl/ and rerun scripts/test.sh"
        )
    with _locked(home):
        if _is_complete(bins, stamp):  # built by whoever held the lock before us
            return bins
        env = _go_env(go_path)
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            work = Path(tmp)
            src = work / "src"
            for name, data in _module_source().items():
                target = src / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
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
            kube_env = {**env, "GOFLAGS": f"{env['GOFLAGS']} -mod=mod".strip()}
            kube_s = _run_go(
                [go_path, "build", "-trimpath", "-ldflags", _kube_ldflags(version), "-o", f"{staged}/",
                 *KUBE_PACKAGES],
                cwd=src,
                env=kube_env,
                what=f"kube-apiserver, kube-scheduler and etcd {version}",
            )  # fmt: skip
            # `go install pkg@version` builds outside any module: run it from the empty work dir.
            kwok_s = _run_go(
                [go_path, "install", "-trimpath", "-ldflags", KWOK_LDFLAGS, f"{KWOK_PACKAGE}@{kwok_version}"],
                cwd=work,
                env={**env, "GOBIN": str(staged)},
                what=f"kwok {kwok_version}",
            )
            for path in bins.all():
                if not (staged / path.name).is_file():
                    raise KubeBinariesError(f"go reported success but {path.name} is not in {staged}")
            old = home / ".bin-old"
            if old.exists():
                shutil.rmtree(old)
            if bins.apiserver.parent.exists():
                bins.apiserver.parent.rename(old)
            staged.rename(bins.apiserver.parent)
            if old.exists():
                shutil.rmtree(old)
        (home / STAMP).write_text(stamp + "\n")
        _record_build_times(
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
    if _stamped(home / NODE_STAMP, stamp, bins.all()):
        return bins
    go_path = shutil.which("go") if go is None else go
    if not go_path:
        raise GoNotFoundError(
            f"the kubelet and kube-controller-manager ({version}) are built from source once and need "
            "Go (>= 1.25) on PATH; fix: install Go from https://go.dev/dl/ and rerun scripts/test.sh"
        )
    with _locked(home):
        if _stamped(home / NODE_STAMP, stamp, bins.all()):
            return bins
        env = _go_env(go_path)
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-node-") as tmp:
            src, staged = Path(tmp) / "src", Path(tmp) / NODE_BIN
            _write_module(src)
            staged.mkdir()
            log.info(
                "building kubelet and kube-controller-manager %s with Go into %s (once)", version, staged
            )
            node_s = _run_go(
                [go_path, "build", "-trimpath", "-ldflags", _kube_ldflags(version), "-o", f"{staged}/",
                 *NODE_PACKAGES],
                cwd=src,
                env={**env, "GOFLAGS": f"{env['GOFLAGS']} -mod=mod".strip()},
                what=f"kubelet and kube-controller-manager {version}",
            )  # fmt: skip
            for path in bins.all():
                if not (staged / path.name).is_file():
                    raise KubeBinariesError(f"go reported success but {path.name} is not in {staged}")
            _replace_dir(staged, bins.kubelet.parent)
        (home / NODE_STAMP).write_text(stamp + "\n")
        _record_build_times(
            home,
            {
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "go": _go_version(go_path, env),
                "cpus": os.cpu_count(),
                "kubelet_controller_manager_s": round(node_s, 1),
                "stamp": stamp[:16],
            },
        )
        log.info("built the node's binaries in %.0fs", node_s)
    return bins
