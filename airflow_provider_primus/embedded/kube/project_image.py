"""The project's own images (``docker/Dockerfile``, targets ``data`` and ``trainer``), built for real
on this machine and cached outside the clone, ready for ``ctr -n k8s.io images import``.

Why it is done this way:

* **No Docker engine and no registry here.** buildah (Debian's package) builds the Dockerfile. Its
  ``BASE`` build argument (``python:3.11-slim`` for users) is a base made without a registry: a
  Debian root filesystem made by ``debootstrap`` (``minbase`` plus ``python3`` and ``python3-venv``)
  from the Debian mirror this machine's apt already uses, imported as a local image.
* **No network inside a build** (``--network none``). Every wheel comes from a wheelhouse in the cache,
  filled once by the host's pip from PyPI (PyPI's torch is the ~3 GB CUDA build: downloaded once,
  never per build) and mounted read-only at ``/wheels``; the Dockerfile's ``PIP_OPTIONS`` is
  ``--no-index --find-links /wheels``.
* **Cached by what goes into each image**: the Dockerfile, ``pyproject.toml``, ``setup.cfg``,
  ``README.md``, ``constraints.txt``, every file of the package, the base's digest and the target.
  The first 16 hex digits of that hash are the image's tag, so a changed source is never mistaken
  for an image already imported into a long-lived containerd. The archive is an OCI image layout
  (``<cache>/project-images/<target>-<tag>.tar``) whose ``ref.name`` is the full reference, which is
  what ``ctr images import`` names it by. buildah's own store (layer cache: the torch layer is reused
  when only the sources change) lives beside it.

Builds run under a file lock, write to a temporary name and rename into place, so an interrupted or
concurrent build never leaves an archive that looks complete. ``build-times.json`` keeps the wall
seconds of each step (cold vs cached) for the docs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_primus.buildcache import locked, record_build_time
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.paths import cache_dir as default_cache_dir

log = logging.getLogger(__name__)

DATA = "data"
TRAINER = "trainer"
TARGETS = (DATA, TRAINER)
REPOSITORY = "primus.dev/airflow-provider-primus"
HOME = "project-images"
# The base: what debootstrap installs, and from which suite. Changing any of it makes a new base.
SUITE = "bookworm"
VARIANT = "minbase"
BASE_PACKAGES = ("python3", "python3-venv")
_BASE_RECIPE = "v1"  # bump when _make_rootfs changes what it removes
_BASE_TRIM = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
              "usr/share/locale", "var/log")  # fmt: skip
# The package files that go into the image (what setuptools packs), not caches or build leftovers.
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so")
CONTEXT_FILES = ("pyproject.toml", "setup.cfg", "README.md", "constraints.txt")
PACKAGE_DIR = "airflow_provider_primus"
DOCKERFILE = "docker/Dockerfile"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class ProjectImageError(PrimusError):
    """A build step failed; the message carries the tail of the tool's output."""


class ImageBuilderUnavailableError(ProjectImageError):
    """This machine cannot build the images; ``missing`` says exactly what it lacks."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__("the project's images cannot be built here; missing: " + "; ".join(missing))
        self.missing = missing


@dataclass(frozen=True)
class ProjectImage:
    target: str
    name: str  # the full reference pods use: primus.dev/airflow-provider-primus/data:<tag>
    archive: Path  # an OCI image layout tarball (gzip layers) for `ctr -n k8s.io images import`
    size: str  # unpacked, as buildah reports it ("817 MB"); "" when its store no longer holds it

    @property
    def archive_bytes(self) -> int:
        return self.archive.stat().st_size


def source_root() -> Path:
    """The checkout the images are built from: the Dockerfile is not part of the installed package."""
    return Path(__file__).resolve().parents[3]


def debian_mirror(sources: Iterable[Path] = APT_SOURCES) -> str | None:
    """The Debian archive this machine's apt uses for ``SUITE`` (one-line or deb822 sources), so
    debootstrap contacts no host that apt does not already contact."""
    files: list[Path] = []
    for path in sources:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".list", ".sources"))
        elif path.is_file():
            files.append(path)
    for path in files:
        text = path.read_text(errors="replace")
        for line in text.splitlines():  # one-line format: deb [opts] URI SUITE COMPONENTS
            match = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if match and match.group(2) == SUITE and "security" not in match.group(1):
                return match.group(1).rstrip("/")
        for stanza in re.split(r"\n\s*\n", text):  # deb822: URIs: / Suites: fields
            fields: dict[str, str] = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, flags=re.MULTILINE))
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if SUITE in suites and uris and "security" not in uris[0]:
                return uris[0].rstrip("/")
    return None


def builder_missing(root: Path | None = None) -> list[str]:
    """What this machine lacks to build the images, one line each; empty when it has everything."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root: buildah and debootstrap run as root here (no rootless set-up)")
    for command, package in (("buildah", "buildah"), ("debootstrap", "debootstrap"), ("runc", "runc")):
        if shutil.which(command) is None:
            missing.append(f"`{command}` on PATH (Debian: apt-get install {package})")
    if debian_mirror() is None:
        missing.append(f"a Debian mirror for {SUITE} in {APT_SOURCES[0]}* (debootstrap uses apt's own)")
    if not ((root or source_root()) / DOCKERFILE).is_file():
        missing.append(f"a source checkout with {DOCKERFILE} (the installed package has no Dockerfile)")
    return missing


# --- hashing what goes into an image -------------------------------------------------------------


def _package_files(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root / PACKAGE_DIR):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        found += [Path(dirpath, f) for f in filenames if not f.endswith(_SKIP_SUFFIXES)]
    return sorted(found)


def context_files(root: Path) -> list[Path]:
    """Every file the build context holds, relative to ``root``: exactly what the hash covers."""
    files = [root / DOCKERFILE, *(root / f for f in CONTEXT_FILES), *_package_files(root)]
    return [f.relative_to(root) for f in files]


def image_key(root: Path, target: str, base_digest: str) -> str:
    digest = hashlib.sha256()
    for rel in context_files(root):
        digest.update(str(rel).encode() + b"\0" + hashlib.sha256((root / rel).read_bytes()).digest())
    for part in (target, base_digest, "oci-archive-v1"):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _base_key(mirror: str) -> str:
    parts = (SUITE, VARIANT, ",".join(BASE_PACKAGES), mirror, platform.machine(), _BASE_RECIPE)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- running tools -------------------------------------------------------------------------------


def _run(cmd: list[str], what: str, *, timeout_s: float = 3600.0, cwd: Path | None = None) -> float:
    """Run ``cmd``; its output goes to a log kept only when it fails. Returns the wall seconds."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              cwd=cwd, timeout=timeout_s, check=False)  # fmt: skip
        if proc.returncode != 0:
            out.seek(0)
            tail = out.read().decode(errors="replace")[-4000:]
            raise ProjectImageError(f"{what} failed ({proc.returncode}): {' '.join(cmd[:6])}…\n{tail}")
    return round(time.monotonic() - started, 1)


class Buildah:
    """buildah with a store of its own in the cache (its layer cache survives between builds)."""

    def __init__(self, home: Path) -> None:
        self.root = home / "buildah"
        # The run root holds locks and mount bookkeeping; /run is emptied at boot, as it should be.
        self.runroot = Path("/run/primus-buildah") / hashlib.sha256(str(self.root).encode()).hexdigest()[:12]

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot),
                "--storage-driver", "overlay", *args]  # fmt: skip

    def run(self, *args: str, what: str, timeout_s: float = 3600.0) -> float:
        return _run(self.argv(*args), what, timeout_s=timeout_s)

    def output(self, *args: str) -> str:
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ProjectImageError(f"buildah {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
        return proc.stdout.strip()

    def has_image(self, name: str) -> bool:
        return subprocess.run(self.argv("inspect", "--type", "image", name), capture_output=True,
                              check=False).returncode == 0  # fmt: skip

    def image_size(self, name: str) -> str:
        if not self.has_image(name):
            return ""
        listed = json.loads(self.output("images", "--json", name) or "[]")
        return str(listed[0].get("size", "")) if listed else ""

    def cleanup_containers(self) -> None:
        """Working containers a failed step left (each holds a mount under the store)."""
        subprocess.run(self.argv("rm", "--all"), capture_output=True, check=False)


# --- the base, the wheelhouse, the images --------------------------------------------------------


def _make_rootfs(target: Path, mirror: str) -> float:
    took = _run(["debootstrap", f"--variant={VARIANT}", f"--include={','.join(BASE_PACKAGES)}", SUITE,
                 str(target), mirror], f"debootstrap {SUITE} from {mirror}", timeout_s=1800)  # fmt: skip
    for rel in _BASE_TRIM:  # an image needs neither apt's indexes nor documentation
        for entry in (target / rel).glob("*"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    # The host's, copied by debootstrap; the container runtime provides its own.
    for rel in ("etc/resolv.conf", "etc/hostname"):
        (target / rel).unlink(missing_ok=True)
    return took


def ensure_base(home: Path, buildah: Buildah, times: dict[str, float]) -> str:
    """The base image's reference in buildah's store: a debootstrapped Debian with python3 and its
    venv module. The root filesystem is kept as a tar in the cache (made once; its digest is part of
    every image's key) and imported into the store whenever the store lacks it."""
    mirror = debian_mirror()
    if mirror is None:
        raise ImageBuilderUnavailableError([f"a Debian mirror for {SUITE} in apt's sources"])
    tar = home / f"base-{SUITE}-{_base_key(mirror)[:16]}.tar"
    if not tar.is_file():
        with tempfile.TemporaryDirectory(dir=home, prefix=".base-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            times["debootstrap"] = _make_rootfs(rootfs, mirror)
            staged = Path(tmp) / "base.tar"
            # Sorted names, fixed times and numeric owners: the same packages give the same bytes.
            _run(["tar", "--sort=name", "--mtime=@0", "--numeric-owner", "--xattrs", "--exclude=./dev/*",
                  "--exclude=./proc/*", "--exclude=./sys/*", "-C", str(rootfs), "-cf", str(staged), "."],
                 "packing the base root filesystem")  # fmt: skip
            staged.replace(tar)
    digest = _file_sha256(tar)
    name = f"localhost/primus-base:{SUITE}-{digest[:16]}"
    if not buildah.has_image(name):
        started = time.monotonic()
        container = buildah.output("from", "--pull-never", "scratch")
        try:
            buildah.run("add", container, str(tar), "/", what="importing the base root filesystem")
            buildah.run("config", "--env", f"PATH={_PATH}", "--cmd", "/bin/sh", container,
                        what="configuring the base")  # fmt: skip
            buildah.run("commit", "--rm", container, name, what="committing the base")
        except BaseException:
            subprocess.run(buildah.argv("rm", container), capture_output=True, check=False)
            raise
        times["base-import"] = round(time.monotonic() - started, 1)
    return name


def wheel_requirements(root: Path) -> list[str]:
    """Everything an image installs: the dependencies, the ``train`` extra and the build backend."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    extras = project["project"].get("optional-dependencies", {})
    build = project.get("build-system", {}).get("requires", [])
    return [*project["project"]["dependencies"], *extras.get("train", []), *build]


def ensure_wheelhouse(root: Path, home: Path, times: dict[str, float]) -> Path:
    """``<cache>/wheels``: cp311 wheels for everything the images install, downloaded from PyPI by
    the host's pip once per change of the requirements or constraints (files already there are not
    fetched again)."""
    wheels = home.parent / "wheels"
    requirements = wheel_requirements(root)
    constraints = (root / "constraints.txt").read_bytes()
    stamp = hashlib.sha256("\n".join(requirements).encode() + b"\0" + constraints).hexdigest()
    if (wheels / ".stamp").is_file() and (wheels / ".stamp").read_text() == stamp:
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    times["wheel-download"] = _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--progress-bar", "off", "--only-binary=:all:", "--python-version", "3.11",
         "-d", str(wheels), "-c", str(root / "constraints.txt"), *requirements],
        "pip download of the images' wheels",
    )  # fmt: skip
    (wheels / ".stamp").write_text(stamp)
    return wheels


def _stage_context(root: Path, target: Path) -> None:
    for rel in context_files(root):
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest)


def _build_target(
    root: Path, home: Path, buildah: Buildah, *, base: str, wheels: Path, target: str, key: str
) -> tuple[str, dict[str, float]]:
    name = f"{REPOSITORY}/{target}:{key[:16]}"
    archive = home / f"{target}-{key[:16]}.tar"
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=home, prefix=f".build-{target}-") as tmp:
        context = Path(tmp) / "context"
        _stage_context(root, context)
        if not buildah.has_image(name):
            try:
                times["build"] = buildah.run(
                    "bud", "--layers", "--force-rm", "--pull-never", "--network", "none",
                    "--format", "oci", "-f", str(context / DOCKERFILE), "--target", target,
                    "--build-arg", f"BASE={base}",
                    "--build-arg", "PIP_OPTIONS=--no-index --find-links /wheels",
                    "--volume", f"{wheels}:/wheels:ro", "-t", name, str(context),
                    what=f"building the {target} image",
                )  # fmt: skip
            finally:
                buildah.cleanup_containers()
        staged = Path(tmp) / "image.tar"
        times["export"] = buildah.run("push", "--quiet", name, f"oci-archive:{staged}:{name}",
                                      what=f"exporting the {target} image")  # fmt: skip
        staged.replace(archive)  # atomic: a reader sees the whole archive or none
    return name, times


def _forget_older(home: Path, buildah: Buildah, target: str, keep: str) -> None:
    """Older archives and tags of ``target`` (a source change makes a new one each time); buildah's
    untagged layers stay as its layer cache."""
    for old in home.glob(f"{target}-*.tar"):
        if old.name != f"{target}-{keep}.tar":
            old.unlink(missing_ok=True)
    listed = json.loads(buildah.output("images", "--json") or "[]")
    for image in listed:
        for ref in image.get("names") or []:
            if ref.startswith(f"{REPOSITORY}/{target}:") and not ref.endswith(f":{keep}"):
                subprocess.run(buildah.argv("rmi", ref), capture_output=True, check=False)


def build_on(
    base: ProjectImage, context: Path, name: str, archive: Path, *, cache_dir: Path | None = None
) -> Path:
    """A user's image built FROM one of the project's (``context``'s Dockerfile takes it as its
    ``TRAINER`` build argument, as docs/examples/two_tower/Dockerfile does), with the same buildah
    store (the base's layers are not copied again) and no network; written to ``archive`` as an OCI
    archive for ``ctr images import``."""
    home = (cache_dir or default_cache_dir()) / HOME
    buildah = Buildah(home)
    with locked(home):
        if not buildah.has_image(base.name):  # a cached archive whose store entry was pruned
            buildah.run("pull", "--quiet", f"oci-archive:{base.archive}", what="loading the base image")
        try:
            buildah.run(
                "bud", "--pull-never", "--network", "none", "--format", "oci",
                "--build-arg", f"TRAINER={base.name}", "-t", name, str(context),
                what=f"building {name}",
            )  # fmt: skip
        finally:
            buildah.cleanup_containers()
        buildah.run("push", "--quiet", name, f"oci-archive:{archive}:{name}", what=f"exporting {name}")
        subprocess.run(buildah.argv("rmi", name), capture_output=True, check=False)  # its layers stay cached
    return archive


def ensure_project_images(
    targets: Iterable[str] = TARGETS, cache_dir: Path | None = None, *, root: Path | None = None
) -> dict[str, ProjectImage]:
    """The images of ``targets`` as OCI archives, built on first use (minutes: the trainer installs
    torch; not on later calls with the same inputs, which only hash the sources)."""
    root = root or source_root()
    missing = builder_missing(root)
    if missing:
        raise ImageBuilderUnavailableError(missing)
    home = (cache_dir or default_cache_dir()) / HOME
    buildah = Buildah(home)
    found: dict[str, ProjectImage] = {}
    with locked(home):
        times: dict[str, float] = {}
        started = time.monotonic()
        base = ensure_base(home, buildah, times)
        base_digest = base.rsplit(":", 1)[1]
        for target in targets:
            if target not in TARGETS:
                raise ValueError(f"unknown target {target!r}; one of {TARGETS}")
            key = image_key(root, target, base_digest)
            name = f"{REPOSITORY}/{target}:{key[:16]}"
            archive = home / f"{target}-{key[:16]}.tar"
            if not archive.is_file():
                wheels = ensure_wheelhouse(root, home, times)
                log.info("building the %s image %s (buildah; minutes the first time)", target, name)
                name, step = _build_target(
                    root, home, buildah, base=base, wheels=wheels, target=target, key=key
                )
                times.update({f"{target}/{k}": v for k, v in step.items()})
                _forget_older(home, buildah, target, key[:16])
            found[target] = ProjectImage(target, name, archive, buildah.image_size(name))
        if times:
            record_build_time(home, {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "total_s": round(time.monotonic() - started, 1),
                "steps_s": times,
                "images": {t: {"name": i.name, "size": i.size, "archive_bytes": i.archive_bytes}
                           for t, i in found.items()},
            })  # fmt: skip
    return found
