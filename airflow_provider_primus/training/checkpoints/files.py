"""Crash-safe training checkpoints: a trainer killed at any instant resumes from a whole checkpoint.

Every file is written under a ``.tmp-`` name, fsynced, then renamed over its final name and the
directory fsynced, so a final name only ever points at complete bytes that survive a power loss.
Readers therefore never need locks. What can still go wrong (a disk flipping bits, a file truncated
by hand or by a broken copy) is handled on read: :meth:`CheckpointStore.latest` skips a newest file
that does not load and resumes from the one before, loudly.

A store has one writer (the trainer): ``save`` removes every stray ``.tmp-`` file it finds, which
would break a second concurrent writer's in-flight save.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from torch.serialization import MAP_LOCATION

from airflow_provider_primus.errors import PrimusError

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
_CKPT_RE = re.compile(r"ckpt-(\d{12,})\.pt")


class CheckpointError(PrimusError):
    """Checkpoints exist but none can be loaded: resuming from scratch would silently lose the run."""


def fsync_dir(path: Path) -> None:
    """Persist a directory's entries: a rename is only durable once its directory is fsynced."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    # O_EXCL on a random name instead of mkstemp: mkstemp forces mode 0600, while checkpoints and
    # published models are meant to be readable by whoever the umask allows (serving, evaluation).
    tmp = path.with_name(f"{TMP_PREFIX}{secrets.token_hex(8)}-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # Also on KeyboardInterrupt: an interrupted save must not leave its bytes behind in-process.
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old content or all of ``data``, even after a crash."""
    _atomic_write(path, lambda f: f.write(data))


def atomic_save(path: Path, obj: Any) -> None:
    """``torch.save`` with :func:`atomic_write_bytes`'s guarantee, streamed to the file (no second
    copy of ``obj`` in memory: a trainer's table shard can be most of its memory)."""
    _atomic_write(path, lambda f: torch.save(obj, f))


class CheckpointStore:
    """``ckpt-{step:012d}.pt`` files in one directory; the newest ``keep`` (by step) are retained.

    "Newest" means the highest step, not the latest mtime: a trainer that resumed from an older step
    after a bad checkpoint overwrites or outgrows the bad one instead of having its fresh saves pruned.
    """

    def __init__(self, directory: Path, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = directory
        self.keep = keep

    def path_for(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:012d}.pt"

    def steps(self) -> list[int]:
        """Steps with a checkpoint file, ascending; whether each one loads is only known by loading it."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := _CKPT_RE.fullmatch(name)))

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(step)
        # A plain dict so that ``latest`` returns the type it promises whatever Mapping was passed.
        payload = dict(state)
        _atomic_write(path, lambda f: torch.save(payload, f))
        self._prune()
        return path

    def latest(self, map_location: MAP_LOCATION = "cpu") -> tuple[int, dict[str, Any]] | None:
        """The newest checkpoint that loads, or None when there is no checkpoint at all.

        Loads onto the CPU by default so a checkpoint written on a GPU host restores anywhere and does
        not double GPU memory; ``load_state_dict`` moves tensors to the parameters' device anyway.
        ``weights_only=False`` unpickles arbitrary objects, which is acceptable only because these
        files were written by this store (optimizer state, RNG state and plain Python need it); do not
        point a store at a directory others can write to.

        Any load error counts as an unreadable file: torch reports truncation and corruption as
        RuntimeError, EOFError, ValueError, UnpicklingError and more, depending on where the damage
        is. An error that is really systemic (a class renamed since the save) fails every file, and
        then this raises :class:`CheckpointError` instead of returning None, so the caller cannot
        mistake "nothing loads" for "nothing saved" and restart training from step 0.
        """
        steps = self.steps()
        last_error: BaseException | None = None
        for step in reversed(steps):
            path = self.path_for(step)
            try:
                state = torch.load(path, map_location=map_location, weights_only=False)
            except FileNotFoundError:
                continue  # pruned between listing and loading; an older or newer one is still there
            except Exception as exc:
                log.warning("checkpoint %s cannot be loaded, trying the previous one: %s", path.name, exc)
                last_error = exc
                continue
            if not isinstance(state, dict):
                log.warning(
                    "checkpoint %s holds a %s, not a dict; skipping it", path.name, type(state).__name__
                )
                last_error = TypeError(f"{path.name} holds a {type(state).__name__}")
                continue
            return step, state
        if last_error is not None:
            raise CheckpointError(
                f"none of the {len(steps)} checkpoints in {self.directory} can be loaded"
            ) from last_error
        return None

    def _prune(self) -> None:
        """Drop checkpoints beyond ``keep`` and leftovers of saves that crashed (single writer)."""
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.startswith(TMP_PREFIX) and not entry.is_dir(follow_symlinks=False):
                    Path(entry.path).unlink(missing_ok=True)
        for step in self.steps()[: -self.keep]:
            self.path_for(step).unlink(missing_ok=True)
