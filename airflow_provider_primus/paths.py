"""Where the provider keeps things outside a clone.

Two roots, both overridable by environment so tests and CI can isolate themselves:

* the **cache** (``PRIMUS_CACHE_DIR``, default ``~/.cache/airflow-provider-primus``) holds what is
  expensive to fetch and safe to share between clones: the Kafka broker's jars;
* **PRIMUS_HOME** (default ``~/.primus``) holds local state: running dev services, job stores.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    configured = os.environ.get("PRIMUS_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "airflow-provider-primus"


def primus_home() -> Path:
    configured = os.environ.get("PRIMUS_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".primus"
