"""Airflow's own authentication for the plugin tests: the auth manager the session's AIRFLOW_HOME
configures (SimpleAuthManager) and JWTs it signs. Validating a token checks Airflow's revoked-token
table, so these fixtures need the session's migrated metadata DB."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def auth_manager(airflow_db: Path) -> Any:
    from airflow.api_fastapi.app import create_auth_manager

    manager = create_auth_manager()
    manager.init()
    return manager


@pytest.fixture(scope="session")
def mint(auth_manager: Any) -> Callable[..., str]:
    """``mint(role="viewer", username="alice", expires_in=600)``: an Airflow JWT for that user."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    def make(role: str | None = "viewer", username: str = "alice", expires_in: int = 600) -> str:
        user = SimpleAuthManagerUser(username=username, role=role)
        return str(auth_manager.generate_jwt(user, expiration_time_in_seconds=expires_in))

    return make


@pytest.fixture(scope="session")
def viewer_token(mint: Callable[..., str]) -> str:
    return mint()
