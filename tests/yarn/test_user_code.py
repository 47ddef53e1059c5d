"""The user's code on YARN: a pure-Python wheel named in ``backend.yarn.wheels`` is staged with the
application, localized into every executor's container and put ahead on its import path, so a
``type: python`` model trains in the containers with nothing installed on the NodeManagers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airflow_provider_primus.contracts import SpecError
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
from tests.example_package import DISTRIBUTION, build_wheel, example_project
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended
from tests.yarn.test_job import YARN_JOB, running, until

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]


def _yarn_job(world: JobWorld, wheels: list[str]) -> Path:
    training = yaml.safe_load(world.training_path.read_text())
    training["spec"]["model"] = {
        "type": "python",
        "entrypoint": "two_tower:build",
        "options": {"tower": [8, 4]},
    }
    training["spec"]["batch_size"] = 200
    training["apiVersion"] = "primus.dev/v1beta1"  # the model protocol is v1beta1's
    world.training_path.write_text(yaml.safe_dump(training))
    backend = {"type": "yarn", "yarn": {**YARN_JOB["backend"]["yarn"], "wheels": wheels}}
    return world.job(**{**YARN_JOB, "backend": backend})


def test_a_python_model_shipped_as_a_wheel_trains_in_the_containers(
    yarn_world: JobWorld, tmp_path: Path
) -> None:
    wheel = build_wheel(example_project(tmp_path))
    submit(_yarn_job(yarn_world, [str(wheel)]), store=yarn_world.store)
    with running(yarn_world):
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert_exactly_once(yarn_world)
    # Built in the container from the wheel itself: the snapshot names its distribution.
    snapshot = latest_snapshot(yarn_world.home / "jobs" / "job" / "train" / "model")
    assert snapshot is not None
    model = snapshot.manifest["model"]
    assert (model["entrypoint"], model["package"]) == ("two_tower:build", DISTRIBUTION)


def test_submit_refuses_what_cannot_go_on_the_import_path(yarn_world: JobWorld, tmp_path: Path) -> None:
    not_a_wheel = tmp_path / "model.tar.gz"
    not_a_wheel.write_bytes(b"\\x1f\\x8b")
    with pytest.raises(SpecError) as raised:
        submit(_yarn_job(yarn_world, [str(not_a_wheel), "missing.whl"]), store=yarn_world.store)
    message = str(raised.value)
    assert "spec.backend.yarn.wheels[0]: 'model.tar.gz' is not a wheel (.whl)" in message
    assert "spec.backend.yarn.wheels[1]: " in message and "missing.whl' is not a file" in message
    assert yarn_world.store.find() == []
