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
