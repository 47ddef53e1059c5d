"""A pyarrow filesystem that adds a fixed delay to every listing and metadata call.

It models an object store's round trip (default 20 ms) on a local tree, so planner benchmarks
measure what dominates on S3/GCS/HDFS — the number and overlap of round trips — on any machine.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pyarrow.fs as pafs


class DelayedHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    def __init__(self, inner: pafs.FileSystem, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s
        # Round trips by kind ("list": listings and stats, "open": opening a file to read its
        # footer): the benchmark derives the plans' I/O floor from them.
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def calls(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def _rt(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1
        if self.delay_s > 0:
            time.sleep(self.delay_s)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DelayedHandler) and other.inner == self.inner

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((type(self), id(self.inner)))

    def get_type_name(self) -> str:
        return "delayed"

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        self._rt("list")
        return list(self.inner.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        self._rt("list")
        return list(self.inner.get_file_info(selector))

    def open_input_file(self, path: str) -> Any:
        self._rt("open")
        return self.inner.open_input_file(path)

    def open_input_stream(self, path: str) -> Any:
        self._rt("open")
        return self.inner.open_input_stream(path)

    # Writes are not part of planning; delegate without delay.
    def create_dir(self, path: str, recursive: bool) -> None:
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refusing to delete the root")

    def delete_file(self, path: str) -> None:
        self.inner.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.inner.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.inner.copy_file(src, dest)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.inner.open_append_stream(path, metadata=metadata)


def delayed_filesystem(delay_s: float) -> tuple[pafs.FileSystem, DelayedHandler]:
    handler = DelayedHandler(pafs.LocalFileSystem(), delay_s)
    return pafs.PyFileSystem(handler), handler
