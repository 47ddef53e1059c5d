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
    """The bad models importable by the check's child and the trainers (the example package is not:
    a job names its folder in backend.local.paths)."""
    monkeypatch.setenv("PYTHONPATH", ":".join([str(TESTS), *sys.path]))


def _recording_python(root: Path) -> tuple[Path, Path]:
    """An interpreter of the job's own (this one behind a script) that records each command it runs."""
    used = root / "python-used"
    python = root / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {used}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python, used


def _model(world: JobWorld, **model: Any) -> None:
    training = yaml.safe_load(world.training_path.read_text())
    training["spec"]["model"] = model
    training["apiVersion"] = "primus.dev/v1beta1"  # the model protocol is v1beta1's
    training["spec"]["batch_size"] = 200
    world.training_path.write_text(yaml.safe_dump(training))


def test_two_trainers_train_the_two_tower_package_in_the_jobs_environment_every_row_once(
    job_world: JobWorld,
) -> None:
    _model(job_world, type="python", entrypoint="two_tower:build", options={"tower": [8, 4]})
    python, used = _recording_python(job_world.root)
    local = {"python": str(python), "paths": [str(EXAMPLE)]}
    submit(job_world.job(backend={"local": local}, **group(2)), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert_every_row_once(job_world)
    commands = used.read_text().splitlines()
    # Checked at submit in that environment (the provider, then the model), and run there.
    assert commands[0] == "-c import airflow_provider_primus"
    assert "airflow_provider_primus.training.entrypoint" in commands[1]
    assert sum(" train " in c for c in commands) == 2 and any(" serve-data " in c for c in commands)


@pytest.mark.parametrize(
    ("local", "path", "says"),
    [
        ({"python": "/no/such/python"}, "spec.backend.local.python", "'/no/such/python' does not exist"),
        ({"python": "/usr/bin/python3"}, "spec.backend.local.python",
         "'/usr/bin/python3' cannot import airflow_provider_primus (install it into that environment): "
         "ModuleNotFoundError"),
        ({"paths": ["no-such-folder"]}, "spec.backend.local.paths[0]", "no-such-folder' is not a folder"),
    ],
)  # fmt: skip
def test_submit_refuses_an_environment_that_cannot_run_the_executors(
    job_world: JobWorld, monkeypatch: pytest.MonkeyPatch, local: dict[str, Any], path: str, says: str
) -> None:
    monkeypatch.delenv("PYTHONPATH")
    with pytest.raises(SpecError) as raised:
        submit(job_world.job(backend={"local": local}), store=job_world.store)
    assert f"{path}: " in str(raised.value) and says in str(raised.value)
    assert job_world.store.find() == []


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
