import json
import subprocess
from importlib import metadata, resources

import jsonschema
import pytest

from airflow_provider_primus.get_provider_info import get_provider_info
from tests.conftest import venv_bin


def airflow_provider_schema() -> dict:
    # The schema that ships inside the installed apache-airflow-core package, not a copy.
    return json.loads(resources.files("airflow").joinpath("provider_info.schema.json").read_text())


def test_provider_info_validates_against_airflow_schema() -> None:
    jsonschema.validate(get_provider_info(), airflow_provider_schema())


@pytest.mark.parametrize(
    "breakage",
    [lambda info: info.pop("name"), lambda info: info.update(operators="not-a-list")],
    ids=["no-name", "operators-not-a-list"],
)
def test_schema_check_can_fail(breakage) -> None:
    broken = dict(get_provider_info())
    breakage(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, airflow_provider_schema())


def test_package_name_matches_distribution_and_entry_point() -> None:
    eps = [ep for ep in metadata.entry_points(group="apache_airflow_provider") if ep.dist is not None]
    ours = [ep for ep in eps if ep.dist.metadata["Name"] == "airflow-provider-primus"]
    assert len(ours) == 1
    assert ours[0].load() is get_provider_info
    assert get_provider_info()["package-name"] == "airflow-provider-primus"


def test_listed_modules_import() -> None:
    import importlib

    info = get_provider_info()
    for section in ("operators", "sensors", "hooks", "triggers"):
        for entry in info.get(section, []):
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_airflow_providers_list_shows_the_provider() -> None:
    proc = subprocess.run(
        [venv_bin("airflow"), "providers", "list", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = {p["package_name"]: p for p in json.loads(proc.stdout)}
    assert "airflow-provider-primus" in listed
    assert listed["airflow-provider-primus"]["version"] == get_provider_info()["versions"][0]


def test_every_airflow_class_is_listed() -> None:
    """Each hook, operator, sensor and trigger class of the package sits in a module the provider
    info lists, every extra link is listed by class, and the connection type names the hook."""
    import importlib
    import inspect
    import pkgutil

    from airflow.sdk import BaseHook, BaseOperator, BaseOperatorLink
    from airflow.triggers.base import BaseTrigger

    import airflow_provider_primus

    info = get_provider_info()
    listed = {
        m
        for section in ("operators", "sensors", "hooks", "triggers")
        for e in info[section]
        for m in e["python-modules"]
    }
    links = set(info["extra-links"])
    found_modules: set[str] = set()
    found_links: set[str] = set()
    for module_info in pkgutil.walk_packages(airflow_provider_primus.__path__, "airflow_provider_primus."):
        if module_info.name.split(".")[1] not in ("hooks", "operators", "sensors", "triggers", "links"):
            continue
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            if issubclass(cls, BaseOperatorLink):
                found_links.add(f"{cls.__module__}.{cls.__qualname__}")
            elif issubclass(cls, (BaseHook, BaseOperator, BaseTrigger)):
                found_modules.add(cls.__module__)
    assert found_modules <= listed, found_modules - listed
    assert found_links == links
    [conn] = info["connection-types"]
    assert conn["connection-type"] == "primus"
    assert conn["hook-class-name"] == "airflow_provider_primus.hooks.primus.PrimusHook"


def test_the_provider_declares_its_config_section_and_the_hook_reads_it(tmp_path) -> None:
    """``airflow config list`` shows the ``[primus]`` section; AIRFLOW__PRIMUS__* settings reach the
    hook (under a connection's extra, which still wins)."""
    import os

    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__PRIMUS__HOME": str(tmp_path / "shared")}
    listed = subprocess.run(
        [venv_bin("airflow"), "config", "list", "--section", "primus", "--show-values"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "[primus]" in listed and f"home = {tmp_path / 'shared'}" in listed
    assert "default_backend = local" in listed and "ui_sample_interval = 5" in listed
    code = "from airflow_provider_primus.hooks.primus import PrimusHook; print(PrimusHook().home)"
    seen = (
        subprocess.run(
            [venv_bin("python"), "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert seen == str(tmp_path / "shared")
