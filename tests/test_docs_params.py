"""docs/airflow.md's parameter reference is generated from the provider's ``:param`` lines
(``scripts/airflow_params.py``, ``make docs``): every parameter has one and the page is up to date."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("airflow_params", REPO / "scripts" / "airflow_params.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_public_parameter_is_documented_and_the_page_is_current() -> None:
    gen = generator()
    found = gen.classes()
    names = {c.name for c in found}
    assert {
        "PrimusHook",
        "PrimusJobTrigger",
        "DataPartitionTrigger",
        "PrimusJobSensor",
        "DataPartitionSensor",
        "StreamFreshnessSensor",
        "PrimusSubmitJobOperator",
        "PrimusStreamingTrainerOperator",
        "PrimusAppendWindowOperator",
        "PrimusScaleOperator",
        "PrimusPlanDataOperator",
        "PrimusDoctorOperator",
    } <= names
    assert gen.undocumented(found) == []
    hook = next(c for c in found if c.name == "PrimusHook")
    assert {"get_status", "aget_status", "stop_job", "astop_job", "cancel_job"} <= {
        m.name for m in hook.methods
    }
    doc = (REPO / "docs" / "airflow.md").read_text()
    assert gen.updated(doc, gen.render(found)) == doc, "docs/airflow.md is out of date: run `make docs`"
