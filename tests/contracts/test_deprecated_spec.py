"""The old package name still imports, warns, and hands out the contracts' own objects."""

import importlib
import sys
import warnings

import pytest

from airflow_provider_primus import contracts
from airflow_provider_primus.contracts import job as contracts_job


def test_the_old_name_warns_and_is_the_same_code() -> None:
    for name in [
        m
        for m in sys.modules
        if m == "airflow_provider_primus.spec" or m.startswith("airflow_provider_primus.spec.")
    ]:
        del sys.modules[name]
    with pytest.warns(DeprecationWarning, match="airflow_provider_primus.contracts"):
        spec = importlib.import_module("airflow_provider_primus.spec")
    assert spec.SpecError is contracts.SpecError
    assert spec.load_data_spec is contracts.load_data_spec
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the submodule is registered: no second import, no warning
        from airflow_provider_primus.spec import job
    assert job is contracts_job
    assert job.PrimusJob is contracts_job.PrimusJob
