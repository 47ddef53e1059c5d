"""Publishing trained models as immutable, versioned snapshots that readers can pick up at any time.

A snapshot is a directory ``v{N:06d}`` holding ``model.pt`` and ``manifest.json``. It is assembled
under a ``.tmp-`` name, fsynced, and renamed into place in one step, so a serving process polling
:func:`latest_snapshot` sees either the previous version or the complete new one, never a half-written
one, without any lock between writer and readers. The manifest records each file's size and sha256 so
damage that happens *after* publishing (a bad disk, a partial copy to another host) is caught on load
instead of being served.

A model directory has one publisher: ``publish`` removes every ``.tmp-`` entry it finds, which would
break a second concurrent publisher's snapshot in progress.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch.serialization import MAP_LOCATION

from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.training.checkpoints.files import TMP_PREFIX, atomic_write_bytes, fsync_dir

log = logging.getLogger(__name__)

MODEL_FILE = "model.pt"
MANIFEST_FILE = "manifest.json"
RESERVED_KEYS = frozenset({"version", "created_at", "files"})
_VERSION_RE = re.compile(r"v(\d{6,})")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


class SnapshotIntegrityError(PrimusError):
    """A snapshot's bytes differ from what its manifest recorded at publish time: do not serve it."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _versions(model_dir: Path) -> list[int]:
    try:
        names = os.listdir(model_dir)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _VERSION_RE.fullmatch(name)))


def _version_dir(model_dir: Path, version: int) -> Path:
    return model_dir / f"v{version:06d}"


@dataclass(frozen=True)
class Snapshot:
    version: int
    path: Path
    manifest: dict[str, Any]

    def load_state(self, map_location: MAP_LOCATION = "cpu", weights_only: bool = True) -> dict[str, Any]:
        """The published state, after checking it byte for byte against the manifest.

        The file is opened once and both hashed and loaded through that handle: once open, pruning
        of this version by the publisher cannot pull it away mid-read. A version pruned between
        :func:`latest_snapshot` and this call raises FileNotFoundError; ask for the latest again.

        ``weights_only`` defaults to True because snapshots are the hand-off to serving hosts, and a
        state dict of tensors and plain Python needs nothing more; the sha256 catches corruption,
        not tampering, since whoever can rewrite ``model.pt`` can rewrite the manifest too.
        Loads onto the CPU by default so a model trained on a GPU restores on any host.
        """
        expected = self.manifest["files"][MODEL_FILE]["sha256"]
        path = self.path / MODEL_FILE
        with open(path, "rb") as f:
            actual = hashlib.file_digest(f, "sha256").hexdigest()
            if actual != expected:
                raise SnapshotIntegrityError(
                    f"{path}: sha256 is {actual} but the manifest of version {self.version} records "
                    f"{expected}; the snapshot is corrupt and must not be loaded"
                )
            f.seek(0)
            state = torch.load(f, map_location=map_location, weights_only=weights_only)
        if not isinstance(state, dict):
            raise SnapshotIntegrityError(f"{path} holds a {type(state).__name__}, not a dict")
        return state


def _read_manifest(path: Path, version: int) -> dict[str, Any] | None:
    """The manifest of a version directory if it is complete and consistent, else None (logged)."""
    try:
        raw = (path / MANIFEST_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        if path.is_dir():
            log.warning("model version %s has no %s; skipping it", path.name, MANIFEST_FILE)
        # Otherwise it was pruned since the listing (or is a stray file): nothing to report.
        return None
    try:
        manifest = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        log.warning("model version %s: unparsable %s (%s); skipping it", path.name, MANIFEST_FILE, exc)
        return None
    problem = _manifest_problem(path, version, manifest)
    if problem is not None:
        log.warning("model version %s: %s; skipping it", path.name, problem)
        return None
    return manifest  # type: ignore[no-any-return]  # checked to be a dict by _manifest_problem


def _manifest_problem(path: Path, version: int, manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return f"{MANIFEST_FILE} is not an object"
    if manifest.get("version") != version:
        return f"{MANIFEST_FILE} says version {manifest.get('version')!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(files.get(MODEL_FILE), dict):
        return f"{MANIFEST_FILE} does not list {MODEL_FILE}"
    for name, entry in files.items():
        if not isinstance(entry, dict):
            return f"{MANIFEST_FILE} has no valid size and sha256 for {name}"
        size, sha = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
            return f"{MANIFEST_FILE} has no valid size and sha256 for {name}"
        try:
            actual = (path / name).stat().st_size
        except FileNotFoundError:
            return f"{name} is missing"
        if actual != size:
            return f"{name} has {actual} bytes, the manifest records {size}"
    return None


def latest_snapshot(model_dir: Path) -> Snapshot | None:
    """The highest published version whose manifest is complete, or None when there is none.

    Only a directory damaged after publishing (or made by hand) can lack a good manifest, since
    ``publish`` renames whole directories into place; such versions are skipped with a warning.
    """
    for version in reversed(_versions(model_dir)):
        path = _version_dir(model_dir, version)
        manifest = _read_manifest(path, version)
        if manifest is not None:
            return Snapshot(version=version, path=path, manifest=manifest)
    return None


def checked_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's manifest fields, refused before anything is written: keys the publisher sets,
    or a value that does not serialize (a multi-gigabyte model must not be written first);
    ``allow_nan=False`` keeps the file valid for non-Python readers."""
    extra = dict(manifest)
    clash = sorted(RESERVED_KEYS & extra.keys())
    if clash:
        raise ValueError(f"manifest keys {clash} are set by the publisher")
    json.dumps(extra, allow_nan=False)
    return extra


class Publisher:
    """Writes snapshots ``v000001``, ``v000002``, … into ``model_dir``, keeping the newest ``keep``."""

    def __init__(self, model_dir: Path, keep: int = 5) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.model_dir = model_dir
        self.keep = keep

    def publish(self, model_state: Mapping[str, Any], manifest: Mapping[str, Any]) -> int:
        """Publish a new version and return its number; on any error nothing becomes visible."""
        extra = checked_manifest(manifest)

        self.model_dir.mkdir(parents=True, exist_ok=True)
        version = max(_versions(self.model_dir), default=0) + 1
        tmp = self.model_dir / f"{TMP_PREFIX}v{version}-{secrets.token_hex(4)}"
        os.mkdir(tmp)
        try:
            model_path = tmp / MODEL_FILE
            with open(model_path, "xb") as f:
                torch.save(dict(model_state), f)
                f.flush()
                os.fsync(f.fileno())
            # Hash what reached the file, read back, rather than what we meant to write.
            files = {MODEL_FILE: {"size": model_path.stat().st_size, "sha256": _sha256(model_path)}}
            full = {
                **extra,
                "version": version,
                "created_at": datetime.now(UTC).isoformat(),
                "files": files,
            }
            data = (json.dumps(full, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
            # Fsyncs the manifest and then ``tmp`` itself, which also makes model.pt's entry durable.
            atomic_write_bytes(tmp / MANIFEST_FILE, data)
            os.rename(tmp, _version_dir(self.model_dir, version))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.model_dir)
        self._prune()
        return version

    def _prune(self) -> None:
        """Drop versions beyond ``keep`` and leftovers of crashed publishes or prunes (single writer)."""
        for version in _versions(self.model_dir)[: -self.keep]:
            old = _version_dir(self.model_dir, version)
            # Rename first: a reader then sees the version whole or not at all, never half-deleted;
            # readers that already opened its model.pt keep reading it (POSIX unlink semantics).
            doomed = self.model_dir / f"{TMP_PREFIX}del-{old.name}-{secrets.token_hex(4)}"
            try:
                os.rename(old, doomed)
            except FileNotFoundError:
                continue
        with os.scandir(self.model_dir) as entries:
            for entry in entries:
                if not entry.name.startswith(TMP_PREFIX):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    Path(entry.path).unlink(missing_ok=True)
