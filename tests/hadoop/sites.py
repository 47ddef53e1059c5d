"""Hadoop configuration files as a cluster's administrator writes them, for tests that need no cluster."""

from __future__ import annotations

from pathlib import Path


def site(path: Path, **props: str) -> None:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    path.write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")
