"""The real node's images, built here: nothing can be pulled from a registry on this kind of machine.

Each image is one static Go binary (``imagesrc/<name>/main.go``, ``CGO_ENABLED=0``) in one layer,
packed as an OCI image layout tarball whose index carries the ``io.containerd.image.name``
annotation, which is what ``ctr images import`` names the image by. The tarball is cached in
``<cache>/node-images/`` under a hash of everything that decides its bytes (the Go sources, the
build flags, the architecture), so a second run neither needs Go nor rebuilds; the tag is that hash,
so a changed source can never be mistaken for the image already imported into a long-lived store.

The layer and the tar members are written with fixed owners and times: the same sources give the
same digests on every machine with the same Go.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airflow_provider_primus.embedded.kube.binaries import GoNotFoundError, KubeBinariesError
from airflow_provider_primus.paths import cache_dir as default_cache_dir

PAUSE = "pause"
CGROUP_PROBE = "cgroupprobe"
REPOSITORY = "primus.dev/node"
_LDFLAGS = "-s -w"
_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class LocalImage:
    name: str  # the full reference pods use, e.g. primus.dev/node/pause:3f2a...
    tarball: Path


def _arch() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def _sources(program: str) -> dict[str, bytes]:
    root = resources.files(__package__).joinpath("imagesrc")
    main = root.joinpath(program).joinpath("main.go")
    return {"go.mod": root.joinpath("go.mod").read_bytes(), f"{program}/main.go": main.read_bytes()}


def image_digest(program: str) -> str:
    """What decides the image's bytes; its first 16 hex digits are the tag."""
    digest = hashlib.sha256()
    for name, data in sorted(_sources(program).items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    for part in (_LDFLAGS, _arch(), "CGO_ENABLED=0", "oci-layout-v1"):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _build_binary(program: str, work: Path, go: str) -> Path:
    src = work / "src"
    for name, data in _sources(program).items():
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    out = work / program
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOOS": "linux", "GOARCH": _arch()}
    env.pop("GOFLAGS", None)
    proc = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", _LDFLAGS, "-o", str(out), f"./{program}"],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise KubeBinariesError(f"building the {program} image's binary failed:\n{proc.stderr[-3000:]}")
    return out


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
    tar.addfile(info, io.BytesIO(data))


def _blob(blobs: dict[str, bytes], data: bytes, media_type: str) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def oci_layout(binary: bytes, entrypoint: str, name: str, tag: str) -> bytes:
    """An OCI image layout (as one tar) holding ``binary`` at ``/<entrypoint>``."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        _tar_member(layer, entrypoint, binary, mode=0o755)
    layer_bytes = layer_buf.getvalue()
    blobs: dict[str, bytes] = {}
    layer_desc = _blob(blobs, layer_bytes, _OCI_LAYER)
    config = {
        "architecture": _arch(),
        "os": "linux",
        "config": {"Entrypoint": [f"/{entrypoint}"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    config_desc = _blob(blobs, json.dumps(config, sort_keys=True).encode(), _OCI_CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": _OCI_MANIFEST, "config": config_desc, "layers": [layer_desc]}
    manifest_desc = _blob(blobs, json.dumps(manifest, sort_keys=True).encode(), _OCI_MANIFEST)
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **manifest_desc,
                "annotations": {
                    "io.containerd.image.name": f"{name}:{tag}",
                    "org.opencontainers.image.ref.name": tag,
                },
                "platform": {"architecture": _arch(), "os": "linux"},
            }
        ],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _tar_member(tar, "index.json", json.dumps(index, sort_keys=True).encode())
        for digest, data in sorted(blobs.items()):
            _tar_member(tar, f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return out.getvalue()


def ensure_image(program: str, cache_dir: Path | None = None, *, go: str | None = None) -> LocalImage:
    """The image for ``program`` (``PAUSE`` or ``CGROUP_PROBE``), built on first use."""
    digest = image_digest(program)
    tag = digest[:16]
    name = f"{REPOSITORY}/{program}"
    home = (cache_dir or default_cache_dir()) / "node-images"
    tarball = home / f"{program}-{tag}.tar"
    if tarball.is_file():
        return LocalImage(f"{name}:{tag}", tarball)
    go_path = shutil.which("go") if go is None else go
    if not go_path:
        raise GoNotFoundError(f"the {program} image is built from Go source once and needs Go on PATH")
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
        binary = _build_binary(program, Path(tmp), go_path).read_bytes()
        staged = Path(tmp) / "image.tar"
        staged.write_bytes(oci_layout(binary, program, name, tag))
        staged.replace(tarball)  # atomic: a reader sees the whole tarball or none
    return LocalImage(f"{name}:{tag}", tarball)
