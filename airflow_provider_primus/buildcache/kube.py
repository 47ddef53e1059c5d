"""The control plane's binaries in the provider's cache: which release, where they live, and the
stamp that says they were built from the sources this package carries.

``<cache>/kube-<version>/bin`` holds kube-apiserver, kube-scheduler, etcd and kwok; ``stamp`` is a
hash of everything that decides their bytes (the Go module in ``embedded/kube/controlplane``, the
kwok version, the link flags). The doctor reads this (it must not build anything);
``embedded/kube/binaries.py`` builds them with Go. The module's files are read as data by their path
in the installed package, never imported.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.buildcache import stamped

__all__ = [
    "KUBE_VERSION",
    "KWOK_LDFLAGS",
    "KWOK_VERSION",
    "MODULE_FILES",
    "STAMP",
    "KubeBinaries",
    "binaries_in",
    "build_stamp",
    "is_complete",
    "kube_ldflags",
    "module_source",
]

KUBE_VERSION = "v1.35.4"
KWOK_VERSION = "v0.8.0"
# The module files copied into the cache; the etcd wrapper is the only source of our own.
MODULE_FILES = ("go.mod", "go.sum", "cmd/etcd/main.go")
STAMP = "stamp"
# The Go module that pins the release (package data of embedded/kube).
CONTROLPLANE = Path(__file__).resolve().parents[1] / "embedded" / "kube" / "controlplane"


def kube_ldflags(version: str) -> str:
    """``-s -w`` strips symbols (about 30% smaller); the ``-X`` lines make ``/version`` and the
    components' compatibility checks see the real release instead of ``v0.0.0-master``."""
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return f"-s -w -X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"


KWOK_LDFLAGS = "-s -w"


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


def module_source() -> dict[str, bytes]:
    return {name: (CONTROLPLANE / name).read_bytes() for name in MODULE_FILES}


def build_stamp(version: str = KUBE_VERSION, kwok_version: str = KWOK_VERSION) -> str:
    """What decides the binaries' bytes; a change in any of it rebuilds."""
    digest = hashlib.sha256()
    for name, data in sorted(module_source().items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for part in (version, kwok_version, kube_ldflags(version), KWOK_LDFLAGS):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def is_complete(bins: KubeBinaries, stamp: str) -> bool:
    return stamped(bins.home / STAMP, stamp, bins.all())
