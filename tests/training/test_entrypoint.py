"""A user's model entrypoint: the example two-tower package passes the protocol's check (in this
process and in a child with the package on its path, single- and multi-hot), and every way a factory
can break the protocol is refused with a message that names the field and the cause."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from airflow_provider_primus.errors import is_terminal
from airflow_provider_primus.training.entrypoint import (
    EntrypointError,
    build_model,
    check_in_child,
    check_model,
    parse_entrypoint,
)
from airflow_provider_primus.training.protocol import (
    FeatureSchema,
    SparseFeature,
    split_parameters,
    synthetic_features,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
    pytest.mark.usefixtures("one_thread"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two_tower" / "src"
SCHEMA = FeatureSchema(
    sparse=(SparseFeature("user_id", 100), SparseFeature("item_id", 50), SparseFeature("hour", 24)),
    dense=("user_activity", "item_price"),
    embedding_dim=8,
)
MULTI_HOT = FeatureSchema(
    sparse=(
        SparseFeature("user_id", 100),
        SparseFeature("user_recent_items", 50, multi_hot=True, pooling="mean", max_length=20),
        SparseFeature("item_id", 50),
    ),
    dense=(),
    embedding_dim=4,
)
BAD = "tests.training.bad_models"


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


@pytest.mark.usefixtures("example_on_path")
@pytest.mark.parametrize("schema", [SCHEMA, MULTI_HOT], ids=["single-hot", "multi-hot"])
def test_the_example_two_tower_model_passes_and_its_tables_are_the_sparse_part(schema: FeatureSchema) -> None:
    model = build_model("two_tower:build", schema, {"tower": [16, 8]})
    check = check_model(model, schema, entrypoint="two_tower:build")
    tables, dense = split_parameters(model)
    assert len(tables) == len(schema.sparse)
    assert all(t.shape[1] == schema.embedding_dim for t in tables)
    assert check.embedding_parameters == sum(t.numel() for t in tables)
    assert check.dense_parameters == sum(p.numel() for p in dense) > 0
    # Seeded by its options, and the caller's random state is left alone.
    state = torch.random.get_rng_state()
    again = build_model("two_tower:build", schema, {"tower": [16, 8]})
    assert torch.equal(state, torch.random.get_rng_state())
    features = synthetic_features(schema, 7, seed=3)
    assert torch.equal(model(features), again(features))


def test_the_check_runs_in_a_child_with_the_trainers_paths() -> None:
    """The package is on the child's path only: this process never imports it."""
    check = check_in_child("two_tower:build", MULTI_HOT, {}, paths=[EXAMPLE])
    assert check.embedding_parameters == (100 + 50 + 50) * 4
    assert check.dense_parameters > 0


def test_synthetic_multi_hot_lists_respect_their_cap_and_offsets() -> None:
    features = synthetic_features(MULTI_HOT, 50, seed=1)
    bag = features.bags["user_recent_items"]
    lengths = torch.diff(torch.cat([bag.offsets, torch.tensor([bag.ids.numel()])]))
    assert bag.offsets[0] == 0 and (lengths >= 0).all() and (lengths <= 20).all()
    assert (bag.ids < 50).all() and features.sparse.shape == (50, 2)
    assert FeatureSchema.from_dict(MULTI_HOT.to_dict()) == MULTI_HOT


@pytest.mark.parametrize(
    ("entrypoint", "message"),
    [
        ("acme.models", "expected 'package.module:factory', got 'acme.models'"),
        ("acme.models:build", "cannot import 'acme.models': ModuleNotFoundError: No module named 'acme'"),
        (f"{BAD}:missing", f"'{BAD}' has no attribute 'missing'"),
        (f"{BAD}:NOT_CALLABLE", "is a int, not a callable factory"),
        (f"{BAD}:raises", rf"{BAD}:raises raised ValueError: unknown option 'lr'"),
        (f"{BAD}:not_a_module", "returned dict, expected a torch.nn.Module"),
        (f"{BAD}:two_logits", r"returned logits of shape \[B, 2\], expected \[B\]"),
        (f"{BAD}:column_logits", r"returned logits of shape \[B, 1\], expected \[B\]"),
        (f"{BAD}:failing_forward", "forward raised KeyError: 'no_such_column'"),
        (f"{BAD}:detached", "logits do not depend on any of its parameters"),
    ],
)
def test_a_factory_that_breaks_the_protocol_is_refused_by_field_and_cause(
    entrypoint: str, message: str
) -> None:
    with pytest.raises(EntrypointError, match=message) as caught:
        parse_entrypoint(entrypoint)
        check_model(build_model(entrypoint, SCHEMA, {"lr": 1}), SCHEMA, entrypoint=entrypoint)
    assert str(caught.value).startswith("training.model.entrypoint: ")
    assert is_terminal(caught.value)


def test_the_child_reports_the_same_messages() -> None:
    with pytest.raises(
        EntrypointError, match=r"training.model.entrypoint: .* shape \[B, 2\], expected \[B\]"
    ):
        check_in_child(f"{BAD}:two_logits", SCHEMA, {})
    with pytest.raises(EntrypointError, match="No module named 'acme'"):
        check_in_child("acme.models:build", SCHEMA, {})


def test_user_code_that_ends_or_breaks_its_process_does_not_end_ours(tmp_path: Path) -> None:
    with pytest.raises(EntrypointError, match="ended without an answer: exit code 3"):
        check_in_child(f"{BAD}:exits", SCHEMA, {})
    (tmp_path / "crashing_models.py").write_text("import os\nos._exit(7)\n")
    with pytest.raises(EntrypointError, match="ended without an answer: exit code 7"):
        check_in_child("crashing_models:build", SCHEMA, {}, paths=[tmp_path])
    (tmp_path / "broken_models.py").write_text("raise RuntimeError('needs a GPU driver')\n")
    with pytest.raises(
        EntrypointError, match="cannot import 'broken_models': RuntimeError: needs a GPU driver"
    ):
        check_in_child("broken_models:build", SCHEMA, {}, paths=[tmp_path])


def test_a_missing_interpreter_is_named() -> None:
    with pytest.raises(EntrypointError, match="cannot start the interpreter '/no/such/python'"):
        check_in_child("two_tower:build", SCHEMA, {}, python="/no/such/python")
