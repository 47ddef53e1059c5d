"""The PrimusTraining contract: strict like the data contract, and checked against its data document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.contracts import SpecError, load_data_spec
from airflow_provider_primus.contracts.data import window_source
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.contracts.training import (
    check_against,
    default_training,
    kafka_sources,
    stream_source,
    table_sizes,
)

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples"


def doc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": spec,
    }


def messages(exc: pytest.ExceptionInfo[SpecError]) -> str:
    return str(exc.value)


def test_defaults_and_the_example_validate() -> None:
    assert default_training().spec.mode == "mixed"
    training = load_training_spec(EXAMPLE / "primus-training.yaml")
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    check_against(training, data)
    assert table_sizes(training, data) == {"user_id": 1000003, "item_id": 1000003}


def test_the_clock_chooses_itself_by_default_and_explicit_clocks_stay() -> None:
    freshness = default_training().spec.mixing.freshness
    assert (freshness.clock, freshness.live_lag_s) == ("auto", 3600.0)
    for name in ("wall", "replay", "auto"):
        chosen = load_training_spec(doc(mixing={"freshness": {"clock": name, "live_lag_s": 600}}))
        assert (chosen.spec.mixing.freshness.clock, chosen.spec.mixing.freshness.live_lag_s) == (name, 600)


def test_a_misspelled_field_is_named_with_a_suggestion() -> None:
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(mixing={"freshnes": {}}))
    assert "spec.mixing.freshnes" in messages(exc) and "freshness" in messages(exc)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"model": {"embedding_dim": 8, "bottom_mlp": [32, 16]}}, "spec.model.bottom_mlp"),
        ({"mode": "online"}, "spec.mode"),
        ({"mixing": {"freshness": {"max_share": 1.5}}}, "spec.mixing.freshness.max_share"),
        ({"mixing": {"freshness": {"clock": "live"}}}, "spec.mixing.freshness.clock"),
        ({"mixing": {"freshness": {"live_lag_s": 0}}}, "spec.mixing.freshness.live_lag_s"),
        ({"mixing": {"sources": {"events": {"cap": 0}}}}, "spec.mixing.sources.events.cap"),
        ({"batch_size": True}, "spec.batch_size"),
        ({"batch_size": 1_000_000_000_000}, "spec.batch_size"),
        ({"model": {"embedding_dim": 10**9}}, "spec.model.embedding_dim"),
        ({"mixing": {"replay": {"share": 1.0}}}, "spec.mixing.replay.share"),
        ({"mixing": {"replay": {"share": -0.1}}}, "spec.mixing.replay.share"),
        ({"mixing": {"shuffle": {"buffer_rows": -1}}}, "spec.mixing.shuffle.buffer_rows"),
    ],
)
def test_bad_values_name_their_field(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(**spec))
    assert path in messages(exc)


def test_batch_size_is_bounded_with_the_bound_named() -> None:
    # 1e12 rows per step would hold every row at once; the bound says what is allowed.
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(batch_size=1_000_000_000_000))
    assert "spec.batch_size: must be at most 1048576" in messages(exc)
    assert load_training_spec(doc(batch_size=1 << 20)).spec.batch_size == 1 << 20


def test_cross_document_checks_name_the_problem() -> None:
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    training = load_training_spec(
        doc(mixing={"sources": {"event": {"loss_weight": 2.0}}}, model={"buckets": {"price": 10}})
    )
    with pytest.raises(SpecError) as exc:
        check_against(training, data)
    text = messages(exc)
    assert "spec.mixing.sources.event" in text and "did you mean 'events'" in text
    assert "spec.model.buckets.price" in text and "not a sparse or multi_hot column" in text


def test_a_holdout_overlapping_the_training_window_is_refused() -> None:
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    training = load_training_spec(
        doc(evaluation={"holdout": {"start": "2026-11-02T00:00:00Z", "end": "2026-11-04T00:00:00Z"}})
    )
    with pytest.raises(SpecError) as exc:
        check_against(training, data)
    assert "spec.evaluation.holdout" in messages(exc)


def test_history_is_shuffled_and_not_replayed_by_default() -> None:
    mixing = default_training().spec.mixing
    assert (mixing.shuffle.buffer_rows, mixing.replay.share, mixing.replay.windows) == (65_536, 0.0, 0)


def test_replay_must_name_a_files_source() -> None:
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    check_against(load_training_spec(doc(mixing={"replay": {"share": 0.2, "windows": 7}})), data)
    with pytest.raises(SpecError) as exc:
        check_against(load_training_spec(doc(mixing={"replay": {"share": 0.2, "source": "events"}})), data)
    assert "spec.mixing.replay.source" in messages(exc) and "not a files source" in messages(exc)


def test_dense_values_are_log1p_transformed_by_default_and_it_can_be_turned_off() -> None:
    assert default_training().spec.model.dense_transform == "log1p"
    assert load_training_spec(doc(model={"dense_transform": "none"})).spec.model.dense_transform == "none"
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(model={"dense_transform": "log"}))
    assert "spec.model.dense_transform" in messages(exc)
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(model={"dense_transfrom": "none"}))
    assert "spec.model.dense_transfrom" in messages(exc) and "dense_transform" in messages(exc)


def test_the_model_type_is_dlrm_by_default_and_dcn_v2_takes_its_cross_settings() -> None:
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    model = default_training().spec.model
    assert (model.type, model.cross_layers, model.cross_rank) == ("dlrm", None, None)
    dcn = load_training_spec(doc(model={"type": "dcn_v2", "cross_layers": 2, "cross_rank": 16}))
    check_against(dcn, data)
    assert (dcn.spec.model.type, dcn.spec.model.cross_layers) == ("dcn_v2", 2)
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(model={"type": "dcnv2"}))
    assert "spec.model.type" in messages(exc)
    with pytest.raises(SpecError) as exc:  # the cross network's settings on a model that has none
        load_training_spec(doc(model={"cross_layers": 2}))
    assert "spec.model.cross_layers" in messages(exc) and "dcn_v2" in messages(exc)
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(model={"type": "dcn_v2", "cross_layers": 0}))
    assert "spec.model.cross_layers" in messages(exc)
    # A rank above the cross network's input width is no factorisation: named with the width.
    sparse = len(data.spec.sources[0].schema_.sparse)
    dense = 1 if data.spec.sources[0].schema_.dense else 0
    width = (sparse + dense) * 16
    with pytest.raises(SpecError) as exc:
        check_against(load_training_spec(doc(model={"type": "dcn_v2", "cross_rank": width + 1})), data)
    assert "spec.model.cross_rank" in messages(exc) and f"input width {width}" in messages(exc)


def test_table_sharding_is_chosen_per_sparse_column_and_checked() -> None:
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    assert default_training().spec.model.sharding == {}  # replicated unless asked
    check_against(load_training_spec(doc(model={"sharding": {"user_id": "row_wise"}})), data)
    with pytest.raises(SpecError) as exc:
        load_training_spec(doc(model={"sharding": {"user_id": "rowwise"}}))
    assert "spec.model.sharding.user_id" in messages(exc)
    training = load_training_spec(
        doc(model={"sharding": {"user": "row_wise"}}, checkpoint={"dir": "s3://bucket/ckpt"})
    )
    with pytest.raises(SpecError) as exc:
        check_against(training, data)
    text = messages(exc)
    assert "spec.model.sharding.user" in text and "did you mean 'user_id'" in text
    assert "spec.checkpoint.dir" in text and "object store" in text


def _several_sources(mixture: list[dict[str, Any]] | None = None) -> Any:
    """The example's data with a second files source (``recent``) and a second topic (``views``)."""
    data = load_data_spec(EXAMPLE / "primus-data.yaml")
    raw = data.model_dump(mode="json", by_alias=True, exclude_none=True)
    history, events = raw["spec"]["sources"]
    recent = {**history, "name": "recent", "uri": history["uri"] + "-recent"}
    views = {**events, "name": "views", "topic": "views"}
    raw["spec"]["sources"] = [history, events, recent, views]
    if mixture is not None:
        raw["spec"]["mixture"] = mixture
    return load_data_spec(raw)


def test_several_files_and_kafka_sources_train_together() -> None:
    """Any number of each: the freshness guard watches the one it names, else the topic of highest
    mixture priority (then weight), else the first declared."""
    data = _several_sources()
    for mode in ("batch", "stream", "mixed"):
        check_against(load_training_spec(doc(mode=mode)), data)
    # events weighs 0.3 at priority 0 in the example's mixture; views, not in it, 1.0 at priority 0
    assert stream_source(default_training(), data).name == "views"  # type: ignore[union-attr]
    ranked = _several_sources(
        [
            {"source": "events", "weight": 0.5, "priority": 1},
            {"source": "views", "weight": 0.2, "priority": 3},
        ]
    )
    assert stream_source(default_training(), ranked).name == "views"  # type: ignore[union-attr]
    named = load_training_spec(doc(mixing={"freshness": {"source": "events"}}))
    assert stream_source(named, ranked).name == "events"  # type: ignore[union-attr]
    assert [s.name for s in kafka_sources(data)] == ["events", "views"]


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        (
            {"mixing": {"freshness": {"source": "recent"}}},
            "spec.mixing.freshness.source",
            "'recent' is not a kafka source (kafka sources: events, views)",
        ),
        (
            {"mixing": {"sources": {"veiws": {"cap": 0.5}}}},
            "spec.mixing.sources.veiws",
            "did you mean 'views'",
        ),
        (
            {"mode": "mixed", "mixing": {"replay": {"share": 0.2}}},
            "spec.mixing.replay.source",
            "name the files source to replay: history, recent",
        ),
    ],
)
def test_bad_combinations_of_several_sources_name_their_field(
    spec: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(SpecError) as exc:
        check_against(load_training_spec(doc(**spec)), _several_sources())
    assert f"{path}: " in messages(exc) and words in messages(exc), messages(exc)


def test_a_window_names_a_files_source_of_the_data() -> None:
    """What a window appended to a running job reads: the files source it names, or the only one."""
    data = _several_sources()
    assert window_source(data, "recent") == "recent"
    cases = {
        None: "source: name the files source this window belongs to "
        "(data 'movielens' has 2: history, recent)",
        "recnt": "source: no files source named 'recnt' in data 'movielens'; did you mean 'recent'?",
        "views": "source: 'views' is a kafka source; windows are appended to files sources (history, recent)",
    }
    for given, message in cases.items():
        with pytest.raises(SpecError) as exc:
            window_source(data, given)
        assert messages(exc) == message
    assert window_source(load_data_spec(EXAMPLE / "primus-data.yaml"), None) == "history"


def beta(**spec: Any) -> dict[str, Any]:
    """The model protocol is v1beta1's (contracts/versions.py)."""
    return {**doc(**spec), "apiVersion": "primus.dev/v1beta1"}


def test_a_python_model_names_its_factory_and_keeps_its_options_as_given() -> None:
    model = {"type": "python", "entrypoint": "acme.models:build", "options": {"tower": [32, 16], "name": "x"}}
    spec = load_training_spec(beta(model=model)).spec.model
    assert (spec.type, spec.entrypoint, spec.options) == ("python", "acme.models:build", model["options"])


@pytest.mark.parametrize(
    ("model", "path", "says"),
    [
        ({"type": "python"}, "spec.model.entrypoint", "needs entrypoint: 'package.module:factory'"),
        ({"type": "python", "entrypoint": "acme.models"}, "spec.model.entrypoint",
         "expected 'package.module:factory', got 'acme.models'"),
        ({"entrypoint": "acme.models:build"}, "spec.model.entrypoint", "belongs to type python"),
        ({"options": {"a": 1}}, "spec.model.options", "belongs to type python"),
        ({"type": "python", "entrypoint": "a:b", "top_mlp": [8]}, "spec.model.top_mlp",
         "belongs to the built-in models"),
        ({"type": "python", "entrypoint": "a:b", "sharding": {"user_id": "row_wise"}}, "spec.model.sharding",
         "row_wise tables (user_id) are for the built-in models"),
        ({"type": "python", "entrypoint": "a:b", "options": {"x": float("nan")}}, "spec.model.options",
         "must hold JSON values"),
    ],
)  # fmt: skip
def test_a_python_models_fields_are_checked_by_name(model: dict[str, Any], path: str, says: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_training_spec(beta(model=model))
    assert path in messages(exc) and says in messages(exc)
