"""The mixing policy alone: pure decisions, checked exactly."""

from __future__ import annotations

from collections import Counter

from airflow_provider_primus.training.feeds.mixer import MixPolicy, SourcePolicy


def policy(**kw: object) -> MixPolicy:
    sources = kw.pop("sources", None) or [
        SourcePolicy("history", weight=0.7, priority=0),
        SourcePolicy("events", weight=0.3, priority=1, stream=True),
    ]
    args = {"batch_size": 100, "window_steps": 10, "max_stream_share": 0.8, **kw}
    return MixPolicy(sources, **args)  # type: ignore[arg-type]


FULL = {"history": 10_000, "events": 10_000}
BOTH = ["history", "events"]


def test_weights_hold_exactly_over_many_steps_despite_rounding() -> None:
    p = policy(sources=[SourcePolicy("a", 1.0), SourcePolicy("b", 1.0), SourcePolicy("c", 1.0)])
    total: Counter[str] = Counter()
    for _ in range(300):
        plan = p.plan({"a": 100, "b": 100, "c": 100}, ["a", "b", "c"], guard=False)
        assert sum(plan.rows.values()) == 100
        total.update(plan.rows)
    assert max(total.values()) - min(total.values()) <= 1  # 1/3 each, not 34/33/33 every step


def test_freshness_guard_raises_the_stream_share_to_its_cap_and_defers_batch_rows() -> None:
    p = policy()
    normal = p.plan(FULL, BOTH, guard=False)
    assert normal.rows == {"history": 70, "events": 30} and not normal.deferred
    lagging = p.plan(FULL, BOTH, guard=True)
    assert lagging.rows == {"history": 20, "events": 80}
    assert lagging.deferred == {"history": 50}


def test_an_idle_stream_leaves_its_capacity_to_batch_data() -> None:
    p = policy()
    plan = p.plan({"history": 10_000, "events": 0}, BOTH, guard=False)
    assert plan.rows == {"history": 100}


def test_spare_capacity_goes_to_the_higher_priority_source_first() -> None:
    sources = [
        SourcePolicy("low", 1.0, priority=0),
        SourcePolicy("high", 1.0, priority=5),
        SourcePolicy("x", 2.0),
    ]
    p = policy(sources=sources)
    plan = p.plan({"low": 1000, "high": 1000, "x": 10}, ["low", "high", "x"], guard=False)
    assert plan.rows == {"low": 25, "high": 65, "x": 10}


def test_cap_bounds_a_spike_within_the_window_but_never_starves_a_step() -> None:
    sources = [SourcePolicy("history", 0.5), SourcePolicy("events", 0.5, priority=1, cap=0.6, stream=True)]
    p = policy(sources=sources, max_stream_share=1.0)
    shares = []
    for _ in range(30):
        plan = p.plan(FULL, BOTH, guard=True)
        shares.append(plan.rows.get("events", 0) / 100)
    assert max(sum(shares[i : i + 10]) / 10 for i in range(21)) <= 0.6 + 1e-9
    only_stream = p.plan({"history": 0, "events": 10_000}, ["events"], guard=True)
    assert only_stream.rows == {"events": 100}  # nobody else has data: the cap does not leave it empty


def test_finished_sources_drop_out_of_the_shares() -> None:
    p = policy()
    assert p.plan(FULL, ["events"], guard=False).rows == {"events": 100}


def test_state_round_trip_continues_identically() -> None:
    a, b = policy(), policy()
    for i in range(7):
        a.plan(FULL, BOTH, guard=i % 3 == 0)
    b.load_state_dict(a.state_dict())
    for i in range(20):
        assert a.plan(FULL, BOTH, guard=i % 2 == 0).rows == b.plan(FULL, BOTH, guard=i % 2 == 0).rows


def scored_stream_policy(**kw: object) -> MixPolicy:
    """The ``batch`` mode's policy: the stream is only scored."""
    sources = [
        SourcePolicy("history", weight=0.75, priority=0),
        SourcePolicy("events", weight=0.25, priority=1, stream=True, trained=False),
    ]
    return policy(sources=sources, **kw)


def test_a_scored_only_stream_never_changes_what_history_trains() -> None:
    lagging, empty = scored_stream_policy(), scored_stream_policy()
    only_history = policy(sources=[SourcePolicy("history", weight=0.75)])
    for step in range(40):
        a = lagging.plan(FULL, BOTH, guard=True)  # a lagging stream: the guard would be on
        b = empty.plan({"history": 10_000, "events": 0}, BOTH, guard=False)
        c = only_history.plan({"history": 10_000}, ["history"], guard=False)
        assert a.rows["history"] == b.rows["history"] == c.rows["history"] == 100, step
        assert not a.guard and not a.deferred  # nothing to protect: the stream is not learned from
        assert "events" not in b.rows


def test_a_scored_only_stream_keeps_its_weights_pace_then_takes_whole_steps() -> None:
    p = scored_stream_policy()
    scored = [p.plan(FULL, BOTH, guard=False).rows["events"] for _ in range(30)]
    assert sum(scored) == 1000  # 100 history rows a step, the stream at 0.25 / 0.75 of them
    assert set(scored) == {33, 34}
    partial = p.plan({"history": 30, "events": 10_000}, BOTH, guard=False)
    assert partial.rows == {"history": 30, "events": 10}  # the pace follows the rows actually trained
    assert p.plan(FULL, ["events"], guard=False).rows == {"events": 100}  # history done: score freely
    assert p.plan({"history": 100, "events": 5}, BOTH, guard=False).rows == {"history": 100, "events": 5}


def test_caps_and_the_window_count_trained_rows_only() -> None:
    sources = [
        SourcePolicy("history", weight=0.5, cap=0.5),
        SourcePolicy("events", weight=0.5, stream=True, trained=False),
    ]
    p = policy(sources=sources)
    for _ in range(15):
        plan = p.plan(FULL, BOTH, guard=False)
        assert plan.rows == {"history": 100, "events": 100}  # a cap never starves the only trained source
