"""A user's model (``model.type: python``) through the product's runtime: the example two-tower
package trains from files and the stream, checkpoints and resumes exactly, publishes a snapshot that
is served back with the same predictions, and a forward that raises in training ends the run with the
user's own frame in the error."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
import torch

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.training.checkpoints.served import served_model
from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
from airflow_provider_primus.training.protocol import split_parameters
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from airflow_provider_primus.training.user_model import UserModel, UserModelError, package_of
from tests.training.conftest import World
from tests.training.test_entrypoint import EXAMPLE
from tests.training.test_runtime import run_trainer

TESTS = Path(__file__).resolve().parents[2]
TWO_TOWER = {"type": "python", "entrypoint": "two_tower:build", "options": {"tower": [16, 8], "seed": 3}}


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package and the test's bad models importable here and in child processes."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", ":".join([str(EXAMPLE), str(TESTS), *sys.path]))


@pytest.mark.usefixtures("on_path")
def test_the_two_tower_package_trains_publishes_and_is_served_back(world: World, tmp_path: Path) -> None:
    world.produce_events(2000, seed=4)
    data = load_data_spec(world.spec_path)
    training = load_training_spec(
        world.training(
            tmp_path / "t.yaml", mode="mixed", batch_size=256, model=TWO_TOWER,
            checkpoint={"every_steps": 20, "every_s": 0}, publish={"every_s": 0},
        )
    )  # fmt: skip
    trainer = Trainer(data, training, TrainOptions(workdir=tmp_path / "w"))
    assert isinstance(trainer.model, UserModel)
    tables, _ = split_parameters(trainer.model.user)
    assert trainer.model.embedding_parameters() == tables and len(tables) == 2  # user_id, item_id
    assert trainer.optim.sparse is not None  # the tables: the sparse optimizer's
    result = trainer.run()
    assert result["rows_trained"] == {"history": world.history_rows, "events": 2000}
    assert 0.5 < result["progressive"]["auc"] < 1.0  # scored before each update: it learned something

    snapshot = latest_snapshot(tmp_path / "w" / "model")
    assert snapshot is not None
    record = snapshot.manifest["model"]
    assert {k: record[k] for k in ("type", "entrypoint", "options", "sparse", "dense")} == {
        "type": "python",
        "entrypoint": "two_tower:build",
        "options": {"tower": [16, 8], "seed": 3},
        "sparse": ["user_id", "item_id"],
        "dense": ["price"],
    }
    assert [f["num_embeddings"] for f in record["schema"]["sparse"]] == [1009, 503]
    assert record["package"] is None  # imported from a path, not an installed distribution
    served = served_model(snapshot)
    assert isinstance(served, UserModel)
    g = torch.Generator().manual_seed(5)
    ids = torch.stack(
        [torch.randint(0, 1009, (64,), generator=g), torch.randint(0, 503, (64,), generator=g)], 1
    )
    prices = torch.rand(64, 1, generator=g)
    prices[0, 0] = float("nan")  # raw, as the protocol hands dense values over
    with torch.no_grad():
        assert torch.equal(served(ids, prices), trainer.model.eval()(ids, prices))


@pytest.mark.usefixtures("on_path")
def test_a_killed_trainer_of_a_python_model_resumes_exactly(world: World, tmp_path: Path) -> None:
    world.produce_events(1500, seed=7)
    training = world.training(
        tmp_path / "t.yaml", mode="mixed", batch_size=1024, model=TWO_TOWER,
        checkpoint={"every_steps": 3, "every_s": 0}, publish={"every_s": 0},
    )  # fmt: skip
    reference = run_trainer(world, tmp_path / "uninterrupted", training)
    workdir = tmp_path / "crashing"
    first = run_trainer(world, workdir, training, kill_at=8)
    steps = [s for s in first["steps"] if s["step"] <= first["checkpoint"]]
    last = run_trainer(world, workdir, training)
    assert last["steps"][0]["step"] == first["checkpoint"] + 1
    steps += last["steps"]
    assert [s["rows"] for s in steps] == [s["rows"] for s in reference["steps"]]
    for key in ("rows_trained", "rows_scored", "steps"):
        assert last["result"][key] == reference["result"][key], key
    # Scored before each update by the resumed weights: equal only if the model resumed exactly.
    assert last["result"]["progressive"]["auc"] == pytest.approx(
        reference["result"]["progressive"]["auc"], abs=1e-6
    )


@pytest.mark.usefixtures("on_path")
def test_a_forward_that_raises_in_training_names_the_users_frame(world: World, tmp_path: Path) -> None:
    data = load_data_spec(world.spec_path)
    model = {"type": "python", "entrypoint": "tests.training.bad_models:fails_on_real_batches"}
    training = load_training_spec(
        world.training(tmp_path / "t.yaml", mode="batch", batch_size=64, model=model)
    )
    trainer = Trainer(data, training, TrainOptions(workdir=tmp_path / "w"))
    with pytest.raises(UserModelError) as raised:
        trainer.run()
    message = str(raised.value)
    assert message.startswith("tests.training.bad_models:fails_on_real_batches's forward raised IndexError: ")
    assert "batch of 64 rows" in message
    assert "(at training/bad_models.py:" in message and "in forward)" in message


def test_a_snapshot_records_the_installed_package_that_provided_the_factory() -> None:
    assert package_of("torch.nn:Linear") == {"name": "torch", "version": importlib.metadata.version("torch")}
    assert package_of("no_such_package.models:build") is None


def test_a_python_models_wrong_logits_in_training_are_refused_by_the_adapter() -> None:
    from airflow_provider_primus.training.protocol import FeatureSchema, SparseFeature
    from tests.training.bad_models import column_logits

    schema = FeatureSchema(sparse=(SparseFeature("a", 10),), dense=(), embedding_dim=4)
    model = UserModel(column_logits(schema, {}), schema, "m:column_logits")
    with pytest.raises(UserModelError, match=r"m:column_logits returned shape \[3, 1\] for 3 rows"):
        model(torch.tensor([[1], [2], [3]]), torch.zeros(3, 0))
