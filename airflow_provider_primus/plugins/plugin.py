"""The Airflow plugin: the Primus jobs pages in Airflow's API server and a link in the UI's nav.

Airflow loads plugins in every component (API server, scheduler, DAG processor, workers), so this
module stays light: the FastAPI app (and Airflow's API-server security module it depends on) is
built on the first request the API server routes to it, by ``LazyApp``.

Discovery: the ``airflow.plugins`` entry point of this distribution
(``primus = "airflow_provider_primus.plugins.plugin:PrimusPlugin"``).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

URL_PREFIX = "/primus"


class LazyApp:
    """An ASGI app that builds ``create_app()`` on its first call and then delegates to it."""

    def __init__(self, factory: Callable[[], Callable[[Scope, Receive, Send], Awaitable[None]]]) -> None:
        self._factory = factory
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._lock = threading.Lock()

    @property
    def app(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = self._factory()
        return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _create_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    from airflow_provider_primus.hooks.primus import provider_setting
    from airflow_provider_primus.plugins.app import DEFAULT_SAMPLE_S, connection_store, create_app

    home = provider_setting("home")
    sample_s = float(provider_setting("ui_sample_interval") or DEFAULT_SAMPLE_S)
    return create_app(
        Path(home).expanduser() / "jobs.sqlite" if home else None,
        store=connection_store(),
        sample_s=sample_s or None,
    )


app = LazyApp(_create_app)


class PrimusPlugin(AirflowPlugin):
    name = "primus"
    # AirflowPlugin declares these as plain (mutable) class attributes; they are read, never mutated.
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Primus jobs"}]  # noqa: RUF012
    # With ``url_route`` the UI shows the page inside its own frame at /plugin/primus-jobs (same
    # origin, so the UI's ``_token`` cookie authenticates it); ``category: browse`` puts it in the
    # Browse menu.
    external_views = [  # noqa: RUF012
        {
            "name": "Primus jobs",
            "href": f"{URL_PREFIX}/jobs",
            "destination": "nav",
            "category": "browse",
            "url_route": "primus-jobs",
        }
    ]
