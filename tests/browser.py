"""A real headless browser for UI tests: Debian's Chromium driven over the DevTools protocol.

Logs in the way the Airflow UI does (its JWT in the ``_token`` cookie), loads a page, waits for it,
and returns its visible text while saving a full-page screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import websockets

from airflow_provider_primus.embedded.kafka.broker import free_port


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class _Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    async def wait_event(self, method: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method for e in self.events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {method} within {timeout_s}s")
            self.events.append(json.loads(await asyncio.wait_for(self.ws.recv(), remaining)))


async def _capture(debugger: str, url: str, token: str, out: Path, expression: str) -> Any:
    async with websockets.connect(debugger, max_size=None) as ws:
        page = _Session(ws)
        await page.call("Page.enable")
        await page.call("Network.enable")
        parts = urlsplit(url)
        await page.call(
            "Network.setCookie", name="_token", value=token, url=f"{parts.scheme}://{parts.netloc}/"
        )
        await page.call("Page.navigate", url=url)
        await page.wait_event("Page.loadEventFired", 60)
        found = await page.call("Runtime.evaluate", expression=expression, returnByValue=True)
        shot = await page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))
        if "exceptionDetails" in found:
            raise RuntimeError(f"{expression}: {found['exceptionDetails']}")
        return found["result"].get("value")


def screenshot(url: str, token: str, out: Path, *, width: int = 1400, height: int = 1800) -> str:
    """The page's visible text; its screenshot is written to ``out``."""
    text: str = evaluate(url, token, out, "document.body.innerText", width=width, height=height)
    return text


def evaluate(
    url: str, token: str, out: Path, expression: str, *, width: int = 1400, height: int = 1800
) -> Any:
    """The value of a JavaScript ``expression`` in the loaded page (JSON-able); its screenshot is
    written to ``out``."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("no Chromium: scripts/bootstrap.sh installs Debian's chromium package")
    port = free_port()
    # Chromium's helpers (renderer, crash handler) can outlive the main process for a moment and
    # still write into the profile: they go with its process group, and what they leave is no error.
    with tempfile.TemporaryDirectory(prefix="primus-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [
                binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", f"--window-size={width},{height}", f"--user-data-dir={profile}",
                "--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={port}", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                        targets = json.loads(r.read())
                    debugger = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
                    break
                except (OSError, StopIteration, ValueError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            return asyncio.run(_capture(debugger, url, token, out, expression))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
