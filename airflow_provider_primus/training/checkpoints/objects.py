"""Checkpoints and published models on an object store or HDFS, committed by a manifest.

An object store has no rename and no directory to fsync, but a PUT is atomic: an object is either
absent or whole, and a multipart upload becomes visible only when it completes. So every payload is
written under a **unique key** first (``ckpt-<step>-<random>.pt``, ``v000042/model-<random>.pt``) and
only then a small **manifest** is PUT that points at it with its size and SHA-256
(``ckpt-<step>.json``, ``v000042/manifest.json``). The manifest is the commit point:

* a reader considers only payloads a manifest points at, and checks size and hash before loading;
  a crash before the manifest leaves an orphan that is never picked on resume;
* retention (``keep``) deletes old manifests first, then their payloads, then orphans: a reader
  never finds a manifest whose payload was deleted before it;
* a manifest is never overwritten by a different checkpoint: pyarrow's S3 client has no
  conditional PUT (``If-None-Match: *``), so like the local stores these assume one writer per
  location, and the unique payload keys keep even a second writer from corrupting a payload.

Loading reads the whole payload (a checkpoint is restored whole); writing streams it as a multipart
upload. Errors name what failed (``checkpoints at s3://…``) and never a credential.

``hdfs://`` uses the same layout with one difference: an HDFS file is visible, growing, while it is
written, so a reader could list a half-written manifest. There a manifest is written under a
``_tmp-`` name first and then renamed into place (an HDFS rename is atomic, over WebHDFS too, where
its OVERWRITE option replaces a manifest of the same step); payloads need no rename (size and hash
are checked).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs
import torch
from torch.serialization import MAP_LOCATION

from airflow_provider_primus.contracts.storage import OBJECT_STORE_SCHEMES, ObjectStorage, uri_scheme
from airflow_provider_primus.data.objectstore import ObjectStoreError, named_failure
from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.training.checkpoints.files import CheckpointError, CheckpointStore
from airflow_provider_primus.training.checkpoints.snapshots import (
    MANIFEST_FILE,
    MODEL_FILE,
    Publisher,
    SnapshotIntegrityError,
    checked_manifest,
)

log = logging.getLogger(__name__)

_MANIFEST_RE = re.compile(r"ckpt-(\d{12,})\.json")
_PAYLOAD_RE = re.compile(r"ckpt-(\d{12,})-[0-9a-f]{16}\.pt")
_VERSION_RE = re.compile(r"v(\d{6,})")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def _names(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    infos: list[pafs.FileInfo] = fs.get_file_info(
        pafs.FileSelector(directory, allow_not_found=True, recursive=False)
    )
    return infos


def _put(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    with fs.open_output_stream(path) as out:
        out.write(data)


_TMP_PREFIX = "_tmp-"
# Where a finished file appears whole only after a rename (see the module's docstring).
RENAME_COMMIT_SCHEMES = ("hdfs",)
REMOTE_SCHEMES = (*OBJECT_STORE_SCHEMES, *RENAME_COMMIT_SCHEMES)


def _commit(fs: pafs.FileSystem, path: str, data: bytes, *, rename: bool) -> None:
    """Write the small file that commits a checkpoint or a version, replacing one of the same name (a
    trainer saves its last step again when the pass ends): a PUT on an object store, a write then an
    atomic rename on HDFS."""
    if not rename:
        _put(fs, path, data)
        return
    folder, _, name = path.rpartition("/")
    staged = f"{folder}/{_TMP_PREFIX}{secrets.token_hex(8)}-{name}"
    _put(fs, staged, data)
    fs.move(staged, path)  # WebHDFS: rename with OVERWRITE (hadoop/filesystem.py)
    if fs.get_file_info(staged).type != pafs.FileType.NotFound:
        # A client whose rename does not replace (libhdfs answers "false"): remove, then rename. A
        # reader in between finds the previous checkpoint, never a partial one.
        _delete(fs, path)
        fs.move(staged, path)


def _get(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as stream:
        data: bytes = stream.readall()
        return data


def _delete(fs: pafs.FileSystem, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def _payload_problem(fs: pafs.FileSystem, path: str, size: Any, sha: Any) -> tuple[str | None, bytes]:
    if not isinstance(size, int) or not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        return "the manifest has no valid size and sha256", b""
    try:
        data = _get(fs, path)
    except FileNotFoundError:
        return f"{path} is missing", b""
    if len(data) != size:
        return f"{path} has {len(data)} bytes, the manifest records {size}", b""
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha:
        return f"{path}: sha256 is {actual}, the manifest records {sha}", b""
    return None, data


class _Prefix:
    """What both stores are: a prefix of one filesystem, keeping the newest ``keep``."""

    def __init__(self, fs: pafs.FileSystem, root: str, keep: int, uri: str | None) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.fs = fs
        self.root = root.rstrip("/")
        self.keep = keep
        self.uri = uri or f"s3://{self.root}"
        self.rename = uri_scheme(self.uri) in RENAME_COMMIT_SCHEMES

    def _orphans(self, folder: str) -> None:
        """Staged commit files left by a writer that died between write and rename."""
        for info in _names(self.fs, folder):
            if info.base_name.startswith(_TMP_PREFIX):
                _delete(self.fs, info.path)


class ObjectCheckpointStore(_Prefix):
    """``ckpt-{step:012d}.json`` manifests pointing at uniquely named payloads under one prefix."""

    def __init__(self, fs: pafs.FileSystem, root: str, keep: int = 3, *, uri: str | None = None) -> None:
        _Prefix.__init__(self, fs, root, keep, uri)

    def path_for(self, step: int) -> PurePosixPath:
        """The manifest that commits the checkpoint of ``step`` (its ``.name`` names the checkpoint)."""
        return PurePosixPath(f"{self.root}/ckpt-{step:012d}.json")

    def _fail(self, action: str, exc: BaseException) -> ObjectStoreError:
        return named_failure("checkpoints", action, self.uri, exc)

    def steps(self) -> list[int]:
        """Steps with a manifest, ascending; payloads without one are not checkpoints."""
        try:
            infos = _names(self.fs, self.root)
        except OSError as exc:
            raise self._fail("listing", exc) from exc
        return sorted(int(m.group(1)) for i in infos if (m := _MANIFEST_RE.fullmatch(i.base_name)))

    def save(self, step: int, state: Mapping[str, Any]) -> PurePosixPath:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        buffer = io.BytesIO()
        torch.save(dict(state), buffer)
        data = buffer.getvalue()
        payload = f"ckpt-{step:012d}-{secrets.token_hex(8)}.pt"
        manifest = {
            "step": step,
            "object": payload,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "created_at": datetime.now(UTC).isoformat(),
        }
        try:
            _put(self.fs, f"{self.root}/{payload}", data)
            # The commit point: only now can a reader see this checkpoint.
            body = json.dumps(manifest, sort_keys=True).encode()
            _commit(self.fs, str(self.path_for(step)), body, rename=self.rename)
        except OSError as exc:
            raise self._fail(f"writing step {step} to", exc) from exc
        self._prune()
        return self.path_for(step)

    def _manifest(self, step: int) -> dict[str, Any] | None:
        try:
            manifest = json.loads(_get(self.fs, str(self.path_for(step))))
        except FileNotFoundError:
            return None  # pruned since the listing
        except ValueError as exc:
            log.warning("checkpoint manifest of step %d is unparsable (%s); skipping it", step, exc)
            return None
        if not isinstance(manifest, dict) or manifest.get("step") != step:
            log.warning("checkpoint manifest of step %d is not this step's; skipping it", step)
            return None
        return manifest

    def latest(self, map_location: MAP_LOCATION = "cpu") -> tuple[int, dict[str, Any]] | None:
        """The newest committed checkpoint that loads, as :meth:`CheckpointStore.latest` promises:
        a damaged newest one falls back to the one before; none loading at all raises."""
        steps = self.steps()
        last_error: BaseException | None = None
        for step in reversed(steps):
            try:
                manifest = self._manifest(step)
                if manifest is None:
                    continue
                name = str(manifest.get("object", ""))
                if not _PAYLOAD_RE.fullmatch(name):
                    raise ValueError(f"manifest names no payload of this store ({name!r})")
                problem, data = _payload_problem(
                    self.fs, f"{self.root}/{name}", manifest.get("size"), manifest.get("sha256")
                )
                if problem is not None:
                    raise ValueError(problem)
                state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
            except ObjectStoreError:
                raise
            except OSError as exc:
                raise self._fail(f"reading step {step} from", exc) from exc
            except Exception as exc:
                log.warning("checkpoint of step %d cannot be loaded, trying the previous one: %s", step, exc)
                last_error = exc
                continue
            if not isinstance(state, dict):
                last_error = TypeError(f"step {step} holds a {type(state).__name__}")
                continue
            return step, state
        if last_error is not None:
            raise CheckpointError(
                f"none of the {len(steps)} checkpoints in {self.uri} can be loaded"
            ) from last_error
        return None

    def _prune(self) -> None:
        """Keep the newest ``keep`` manifests; delete older manifests, then every payload no kept
        manifest points at (old ones and orphans of crashed saves: one writer per store)."""
        try:
            steps = self.steps()
            for step in steps[: -self.keep]:
                _delete(self.fs, str(self.path_for(step)))
            kept = set()
            for step in steps[-self.keep :]:
                manifest = self._manifest(step)
                if manifest is not None:
                    kept.add(str(manifest.get("object")))
            for info in _names(self.fs, self.root):
                if _PAYLOAD_RE.fullmatch(info.base_name) and info.base_name not in kept:
                    _delete(self.fs, info.path)
            if self.rename:
                self._orphans(self.root)
        except OSError as exc:  # retention is best effort: the checkpoint itself is committed
            log.warning("checkpoints at %s: pruning old checkpoints failed: %s", self.uri, exc)


@dataclass(frozen=True)
class ObjectSnapshot:
    """A published version on an object store; :meth:`load_state` verifies it byte for byte."""

    version: int
    path: str
    manifest: dict[str, Any]
    fs: pafs.FileSystem

    def load_state(self, map_location: MAP_LOCATION = "cpu", weights_only: bool = True) -> dict[str, Any]:
        entry = self.manifest["files"][MODEL_FILE]
        key = f"{self.path}/{entry.get('object', MODEL_FILE)}"
        problem, data = _payload_problem(self.fs, key, entry.get("size"), entry.get("sha256"))
        if problem is not None:
            raise SnapshotIntegrityError(f"version {self.version}: {problem}; it must not be loaded")
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
        if not isinstance(state, dict):
            raise SnapshotIntegrityError(f"{key} holds a {type(state).__name__}, not a dict")
        return state


def _object_versions(fs: pafs.FileSystem, root: str) -> list[int]:
    return sorted(
        int(m.group(1))
        for i in _names(fs, root)
        if i.type == pafs.FileType.Directory and (m := _VERSION_RE.fullmatch(i.base_name))
    )


def latest_object_snapshot(fs: pafs.FileSystem, root: str) -> ObjectSnapshot | None:
    """The highest version with a manifest (its commit point); versions without one are invisible."""
    root = root.rstrip("/")
    for version in reversed(_object_versions(fs, root)):
        path = f"{root}/v{version:06d}"
        try:
            manifest = json.loads(_get(fs, f"{path}/{MANIFEST_FILE}"))
        except FileNotFoundError:
            continue  # a publish that crashed before its manifest, or pruned since the listing
        except ValueError as exc:
            log.warning("model version v%06d: unparsable %s (%s); skipping it", version, MANIFEST_FILE, exc)
            continue
        if isinstance(manifest, dict) and manifest.get("version") == version:
            return ObjectSnapshot(version, path, manifest, fs)
    return None


class ObjectPublisher(_Prefix):
    """Publishes ``v000001/``, ``v000002/``, … under a prefix, keeping the newest ``keep``."""

    def __init__(self, fs: pafs.FileSystem, root: str, keep: int = 5, *, uri: str | None = None) -> None:
        _Prefix.__init__(self, fs, root, keep, uri)

    def _committed(self) -> list[int]:
        return [
            v
            for v in _object_versions(self.fs, self.root)
            if self.fs.get_file_info(f"{self.root}/v{v:06d}/{MANIFEST_FILE}").type == pafs.FileType.File
        ]

    def publish(self, model_state: Mapping[str, Any], manifest: Mapping[str, Any]) -> int:
        extra = checked_manifest(manifest)
        buffer = io.BytesIO()
        torch.save(dict(model_state), buffer)
        data = buffer.getvalue()
        try:
            # Past every version directory, committed or not: a crashed publish's orphan payload is
            # never mistaken for this version's.
            version = max(_object_versions(self.fs, self.root), default=0) + 1
            path = f"{self.root}/v{version:06d}"
            payload = f"model-{secrets.token_hex(8)}.pt"
            _put(self.fs, f"{path}/{payload}", data)
            full = {
                **extra,
                "version": version,
                "created_at": datetime.now(UTC).isoformat(),
                "files": {
                    MODEL_FILE: {
                        "object": payload,
                        "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(),
                    }
                },
            }
            body = (json.dumps(full, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
            _commit(self.fs, f"{path}/{MANIFEST_FILE}", body, rename=self.rename)  # the commit point
        except OSError as exc:
            raise named_failure("published models", "writing to", self.uri, exc) from exc
        self._prune()
        return version

    def _prune(self) -> None:
        """Drop committed versions beyond ``keep`` (manifest first) and uncommitted ones below the
        newest committed version (crashed publishes; one publisher per location)."""
        try:
            committed = self._committed()
            newest = committed[-1] if committed else 0
            doomed = set(committed[: -self.keep])
            doomed |= {v for v in _object_versions(self.fs, self.root) if v < newest and v not in committed}
            for version in sorted(doomed):
                path = f"{self.root}/v{version:06d}"
                _delete(self.fs, f"{path}/{MANIFEST_FILE}")
                self.fs.delete_dir(path)
            if self.rename and newest:
                self._orphans(f"{self.root}/v{newest:06d}")
        except OSError as exc:
            log.warning("published models at %s: pruning old versions failed: %s", self.uri, exc)


def _remote(location: str | Path) -> bool:
    return isinstance(location, str) and uri_scheme(location) in REMOTE_SCHEMES


def checkpoint_store_for(
    location: str | Path, keep: int, storage: ObjectStorage | None = None
) -> CheckpointStore | ObjectCheckpointStore:
    """A local directory's :class:`CheckpointStore` as before, or the manifest-committed store for
    ``s3://`` and ``hdfs://``."""
    if _remote(location):
        assert isinstance(location, str)
        fs, root = open_filesystem(location, storage, owner="checkpoints")
        return ObjectCheckpointStore(fs, root, keep, uri=location)
    return CheckpointStore(Path(location), keep=keep)


def publisher_for(
    location: str | Path, keep: int, storage: ObjectStorage | None = None
) -> Publisher | ObjectPublisher:
    """A local directory's :class:`Publisher` as before, or the manifest-committed one for ``s3://``
    and ``hdfs://``."""
    if _remote(location):
        assert isinstance(location, str)
        fs, root = open_filesystem(location, storage, owner="published models")
        return ObjectPublisher(fs, root, keep, uri=location)
    return Publisher(Path(location), keep=keep)
