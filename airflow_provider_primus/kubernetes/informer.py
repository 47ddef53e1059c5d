"""An informer: list once, then watch, and keep a name → object cache of one collection current.

What makes an idle reconcile pass free: the master's job store and its executor backend read their
objects from such a cache instead of asking the apiserver on every pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_primus.kubernetes.client import KubeApi, KubeError

log = logging.getLogger(__name__)


class Informer:
    """List once, then watch from that resourceVersion and keep a name → object cache current.

    A watch ends (server timeout, a dropped connection): it resumes from the last resourceVersion it
    saw, bookmarks included, so nothing is listed again. Only when the apiserver has compacted that
    version away (410 Gone) does it list afresh. ``wait_for`` lets callers await a condition on the
    cache instead of polling the server.
    """

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 240,
    ) -> None:
        self.api, self.path = api, path
        self.query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        self.watch_timeout_s = watch_timeout_s
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.cond = threading.Condition()
        self.restarts = 0  # watches resumed after they ended
        self.relists = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        self._list()
        self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _list(self) -> None:
        listing = self.api.get(self.path, **self.query)
        with self.cond:
            self.objects = {o["metadata"]["name"]: o for o in listing.get("items", [])}
            self.resource_version = listing["metadata"]["resourceVersion"]
            self.cond.notify_all()

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        meta = obj.get("metadata") or {}
        with self.cond:
            if meta.get("resourceVersion"):
                self.resource_version = meta["resourceVersion"]
            if kind == "BOOKMARK":
                return
            if kind == "DELETED":
                self.objects.pop(meta["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[meta["name"]] = dict(obj)
            self.cond.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.api.watch(
                    self.path,
                    resource_version=self.resource_version,
                    timeout_s=self.watch_timeout_s,
                    **self.query,
                ):
                    if self._stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        if (event.get("object") or {}).get("code") == 410:
                            self.relists += 1
                            self._list()
                        break
                    self._apply(event)
                self.restarts += 1
            except KubeError as exc:
                if exc.status == 410:
                    self.relists += 1
                    self._relist_quietly()
                else:
                    log.warning("watch %s: %s; resuming", self.path, exc)
                    self._stop.wait(1.0)
            except Exception as exc:  # a dropped connection: resume from the last version seen
                log.info("watch %s ended (%s); resuming", self.path, exc)
                self.restarts += 1
                self._stop.wait(0.2)

    def _relist_quietly(self) -> None:
        try:
            self._list()
        except Exception as exc:
            log.warning("relist %s: %s", self.path, exc)
            self._stop.wait(1.0)

    def get(self, name: str) -> dict[str, Any] | None:
        with self.cond:
            return self.objects.get(name)

    def items(self) -> list[dict[str, Any]]:
        with self.cond:
            return list(self.objects.values())

    def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not predicate(self.objects):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True
