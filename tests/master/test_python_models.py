"""A job whose training document names the user's own model (``model.type: python``): checked before
anything is launched, trained by two data-parallel trainers exactly once, and failed at once, with
the user's frame in its status, when the user's forward raises in training."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_primus.contracts import SpecError
from airflow_provider_primus.master.jobs import submit
from tests.master.conftest import JobWorld
from tests.master.test_master import ended, executor, running, until
from tests.master.test_trainers import assert_every_row_once, group
from tests.training.test_entrypoint import EXAMPLE

pytestmark = pytest.mark.timeout(300)
TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package and the bad models importable by the check's child and the trainers."""
    monkeypatch.setenv("PYTHONPATH", ":".join([str(EXAMPLE), str(TESTS), *sys.path]))


def _model(world: JobWorld, **model: Any) -> None:
    training = yaml.safe_load(world.training_path.read_text())
    training["spec"]["model"] = model
    training["apiVersion"] = "primus.dev/v1beta1"  # the model protocol is v1beta1's
    training["spec"]["batch_size"] = 200
    world.training_path.write_text(yaml.safe_dump(training))


def test_two_trainers_train_the_two_tower_package_every_row_once(job_world: JobWorld) -> None:
    _model(job_world, type="python", entrypoint="two_tower:build", options={"tower": [8, 4]})
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert_every_row_once(job_world)


def test_a_python_model_that_raises_in_training_fails_the_job_at_once(job_world: JobWorld) -> None:
    _model(job_world, type="python", entrypoint="tests.training.bad_models:fails_on_real_batches")
    submit(job_world.job(), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    assert record.status["phase"] == "Failed"
    message = record.status["message"]
    assert "fails_on_real_batches's forward raised IndexError: batch of 200 rows" in message
    assert "training/bad_models.py:" in message
    assert executor(record, "trainer-0")["restarts"] == 0  # terminal: no crash loop
    events = [e for e in job_world.store.events("job") if "bad_models.py" in str(e.data)]
    assert events, "the user's frame is in the job's events"


@pytest.mark.parametrize(
    ("entrypoint", "says"),
    [
        ("acme.models:build", "cannot import 'acme.models': ModuleNotFoundError: No module named 'acme'"),
        ("tests.training.bad_models:two_logits", "returned logits of shape [B, 2], expected [B]"),
    ],
)
def test_submit_refuses_a_model_that_does_not_build_or_run_and_launches_nothing(
    job_world: JobWorld, entrypoint: str, says: str
) -> None:
    _model(job_world, type="python", entrypoint=entrypoint)
    with pytest.raises(SpecError) as raised:
        submit(job_world.job(), store=job_world.store)
    assert "spec.training: training.model.entrypoint: " in str(raised.value)
    assert says in str(raised.value)
    assert job_world.store.find() == []
