"""Airflow's own authentication for the plugin's routes.

Airflow mounts a plugin's FastAPI app under its API server but does not authenticate it: every
route here depends on Airflow's ``requires_access_view(AccessView.WEBSITE)`` (from
``airflow.api_fastapi.core_api.security``). That dependency is built on Airflow's ``get_user``,
which validates the Airflow JWT from ``Authorization: Bearer …`` or from the ``_token`` cookie the
Airflow UI sets (signature, expiry, audience and revocation, through the configured auth manager),
then asks the auth manager whether the user may see the Airflow UI. So whoever may open the
Airflow UI may open these pages; without a token: 401, with an invalid one or without that
permission: 403. A browser that asks for a page without a token is sent to Airflow's login page
(what the Airflow UI does), and comes back after logging in.

Airflow's security module imports the API server's models; it is imported only when the app is
built, never when the plugin is merely loaded (schedulers and workers load plugins too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request


def airflow_access_dependency() -> Callable[..., Any]:
    """The dependency every route of the plugin app declares."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    dependency: Callable[..., Any] = requires_access_view(AccessView.WEBSITE)
    return dependency


def login_url(request: Request) -> str | None:
    """Airflow's login page, returning to this request's path; None if no auth manager is set up."""
    try:
        from airflow.api_fastapi.app import get_auth_manager

        manager = get_auth_manager()
    except (ImportError, RuntimeError):
        return None
    # The full path, mount prefix included, whichever way the server fills ``path`` for a mount.
    root = str(request.scope.get("root_path", ""))
    path = root + request.url.path.removeprefix(root)
    next_url = path + (f"?{request.url.query}" if request.url.query else "")
    url = str(manager.get_url_login(next_url=next_url))
    # Only ever a path on this server (or the auth manager's configured login page).
    return url if url.startswith("/") or urlsplit(url).scheme in ("http", "https") else None
