"""The Airflow plugin: discovered by Airflow's plugins manager through the ``airflow.plugins``
entry point, mounted by the API server's own ``init_plugins`` and listed in the UI's nav."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_provider_primus.master.store import SqliteJobStore
from airflow_provider_primus.plugins import plugin as plugin_module
from airflow_provider_primus.plugins.plugin import PrimusPlugin

pytestmark = pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = "airflow_provider_primus.plugins.plugin:PrimusPlugin"


def _clear_plugin_caches() -> None:
    from airflow import plugins_manager

    for cached in (
        plugins_manager._get_plugins,
        plugins_manager.get_fastapi_plugins,
        plugins_manager._get_ui_plugins,
    ):
        cached.cache_clear()


@pytest.fixture
def discovered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Airflow's plugins manager sees this distribution's ``airflow.plugins`` entry point, exactly as
    it will once pyproject.toml declares it (the editable install's metadata is not touched)."""
    from airflow._shared import module_loading

    dist = metadata.distribution("airflow-provider-primus")
    entry_point = metadata.EntryPoint(name="primus", value=ENTRY_POINT, group="airflow.plugins")
    original = module_loading.entry_points_with_dist

    def entry_points_with_dist(group: str) -> Iterator[tuple[metadata.EntryPoint, metadata.Distribution]]:
        if group == "airflow.plugins":
            return iter([(entry_point, dist)])
        return original(group)

    monkeypatch.setattr(module_loading, "entry_points_with_dist", entry_points_with_dist)
    _clear_plugin_caches()
    yield
    _clear_plugin_caches()


@pytest.fixture
def fresh_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plugin's lazily built app, rebuilt for this test and its sampler stopped afterwards."""
    monkeypatch.setattr(plugin_module.app, "_app", None)
    yield
    built: Any = plugin_module.app._app
    if built is not None and built.state.sampler is not None:
        built.state.sampler.stop()


def test_the_plugin_declares_its_app_and_nav_entry() -> None:
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse, FastAPIAppResponse

    assert PrimusPlugin.name == "primus"
    (app,) = PrimusPlugin.fastapi_apps
    assert (app["url_prefix"], app["name"]) == ("/primus", "Primus jobs")
    FastAPIAppResponse.model_validate({**app, "app": "x"})
    (view,) = PrimusPlugin.external_views
    parsed = ExternalViewResponse.model_validate(view)
    assert (parsed.name, parsed.href, parsed.destination, parsed.category, parsed.url_route) == (
        "Primus jobs",
        "/primus/jobs",
        "nav",
        "browse",
        "primus-jobs",
    )


def test_loading_the_plugin_stays_light() -> None:
    """Schedulers and workers load plugins too: importing the plugin builds no app and imports
    neither FastAPI nor Airflow's API-server security module."""
    code = (
        "import sys; import airflow_provider_primus.plugins.plugin as p; "
        "assert p.app._app is None; "
        "heavy = [m for m in ('fastapi', 'airflow.api_fastapi.core_api.security') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.usefixtures("discovered")
def test_airflow_discovers_the_plugin_through_its_entry_point() -> None:
    from airflow import plugins_manager
    from airflow.api_fastapi.core_api.datamodels.plugins import PluginResponse

    plugins, errors = plugins_manager._get_plugins()
    (primus,) = [p for p in plugins if p.name == "primus"]
    assert isinstance(primus, PrimusPlugin) and not errors
    assert "airflow-provider-primus==" in str(primus.source) and ENTRY_POINT in str(primus.source)

    apps, _ = plugins_manager.get_fastapi_plugins()
    assert any(a["url_prefix"] == "/primus" and a["app"] is plugin_module.app for a in apps)
    external_views, _ = plugins_manager._get_ui_plugins()
    assert [v["url_route"] for v in external_views] == ["primus-jobs"]
    # What GET /api/v2/plugins serializes for it.
    (info,) = [i for i in plugins_manager.get_plugin_info() if i["name"] == "primus"]
    response = PluginResponse.model_validate(info)
    assert response.fastapi_apps[0].app == "airflow_provider_primus.plugins.plugin.LazyApp"
    assert response.external_views[0].href == "/primus/jobs"


@pytest.mark.usefixtures("discovered", "fresh_app")
def test_the_api_server_mounts_it_behind_airflow_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, viewer_token: str
) -> None:
    from airflow.api_fastapi.app import init_plugins

    monkeypatch.setenv("PRIMUS_HOME", str(tmp_path))
    SqliteJobStore(tmp_path / "jobs.sqlite").create("mounted", {"kind": "PrimusJob"}, {"team": "ads"})
    server = FastAPI()
    init_plugins(server)  # what Airflow's API server does with every plugin's fastapi_apps

    with TestClient(server) as anonymous:
        r = anonymous.get("/primus/jobs", follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, "/auth/login?next=%2Fprimus%2Fjobs")
        assert anonymous.get("/primus/api/jobs").status_code == 401
    with TestClient(server, cookies={"_token": viewer_token}) as browser:
        page = browser.get("/primus/jobs")
        assert page.status_code == 200
        assert '<a href="/primus/jobs/mounted">mounted</a>' in page.text  # links keep the mount prefix
        job = browser.get("/primus/jobs/mounted")
        assert job.status_code == 200 and 'href="/primus/api/jobs/mounted"' in job.text
        assert browser.get("/primus/", follow_redirects=False).headers["location"] == "/primus/jobs"


def test_pyproject_declares_the_entry_point() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["airflow.plugins"] == {"primus": ENTRY_POINT}
