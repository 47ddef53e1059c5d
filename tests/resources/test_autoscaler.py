"""The autoscaler on recorded traces and a small closed loop.

Recorded traces (``traces/*.jsonl``, one ``Sample.to_dict()`` a line) are replayed the way the master
runs the autoscaler: ``decide`` at every sample time, earlier decisions fed back as history. Single
rules are exercised on traces built here, where each test states the figures that matter.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from airflow_provider_primus.contracts.job import Scaling
from airflow_provider_primus.resources.autoscaler import Decision, RoleView, decide
from airflow_provider_primus.resources.telemetry import Sample

TRACES = Path(__file__).parent / "traces"
MI = 2**20
GI = 2**30
HORIZONTAL = ("scale_out", "scale_in")
Value = float | Callable[[float], float]


def _at(value: Value, t: float) -> float:
    return value(t) if callable(value) else value


def series(
    executor: str,
    role: str,
    *,
    cpu: float = 1.0,
    memory: int = GI,
    util: Value = 0.7,
    mem: Value = 0.5,
    wait: Value = 0.1,
    rows_per_s: Value = 100.0,
    start: float = 0.0,
    end: float = 30.0,
    step: float = 1.0,
) -> list[Sample]:
    """One executor sampled every ``step``: ``util`` of its cores, ``mem`` of its memory, and ``wait``
    the share of each interval spent waiting (trainer: for data; data executor: on credit)."""
    out: list[Sample] = []
    cpu_s = rows = wait_s = busy_s = 0.0
    for i in range(round((end - start) / step) + 1):
        t = start + i * step
        if i:
            share = _at(wait, t)
            cpu_s += _at(util, t) * cpu * step
            rows += _at(rows_per_s, t) * step
            wait_s += share * step
            busy_s += (1 - share) * step
        rss = int(_at(mem, t) * memory)
        out.append(Sample(t, executor, role, cpu, memory, cpu_s, rss, 0, 0, int(rows), wait_s, busy_s))
    return out


def views(
    *,
    data_replicas: int = 2,
    data_min: int = 1,
    data_max: int = 4,
    data_cpu: tuple[float, float] = (0.5, 2.0),
    trainer_cpu: tuple[float, float] = (0.5, 4.0),
    memory: tuple[int, int] = (256 * MI, 4 * GI),
) -> dict[str, RoleView]:
    return {
        "data": RoleView("data", data_replicas, data_min, data_max, data_cpu, memory, 1.0, GI),
        "trainer": RoleView("trainer", 1, 1, 1, trainer_cpu, memory, 2.0, GI),
    }


def load_trace(name: str) -> list[Sample]:
    lines = (TRACES / name).read_text().splitlines()
    return [Sample.from_dict(json.loads(line)) for line in lines if line.strip()]


def replay(samples: Sequence[Sample], roles: dict[str, RoleView], policy: Scaling) -> list[Decision]:
    """The master's loop, except that applied decisions change nothing in the trace."""
    history: list[Decision] = []
    for t in sorted({s.t for s in samples}):
        history += decide(samples, roles, policy, t, history)
    return history


def _up(d: Decision) -> bool:
    return d.after > d.before


def reversals(decisions: Sequence[Decision], window_s: float) -> list[tuple[Decision, Decision]]:
    found = []
    for i, a in enumerate(decisions):
        for b in decisions[i + 1 :]:
            if b.t - a.t >= window_s or _up(a) == _up(b):
                continue
            horizontal = a.action in HORIZONTAL and b.action in HORIZONTAL and a.role == b.role
            if horizontal or (a.action == b.action not in HORIZONTAL and a.executor == b.executor):
                found.append((a, b))
    return found


def starving_picture(*, data_cpu: float = 1.0, end: float = 30.0) -> list[Sample]:
    return [
        *series("trainer-0", "trainer", cpu=2.0, util=0.35, wait=0.62, end=end),
        *series("data-0", "data", cpu=data_cpu, util=0.97, wait=0.0, end=end),
        *series("data-1", "data", cpu=data_cpu, util=0.97, wait=0.0, end=end),
    ]


# --- recorded traces -------------------------------------------------------------------------------


def test_steady_trace_replayed_step_by_step_yields_no_decisions() -> None:
    samples = load_trace("steady.jsonl")
    assert len({s.executor for s in samples}) == 3 and max(s.t for s in samples) >= 40
    assert replay(samples, views(), Scaling()) == []
    assert replay(samples, views(), Scaling(cooldown_s=2.0)) == []


@pytest.mark.parametrize(("cooldown_s", "at_most"), [(15.0, 3), (3.0, 12)])
def test_noisy_steady_trace_never_reverses_within_a_window(cooldown_s: float, at_most: int) -> None:
    # Starvation swings 0.1..0.3 and data CPU 0.7..0.9 (slowly, plus jitter) across the scale-out
    # thresholds. A cooldown shorter than the window leaves only the reversal guard between them.
    samples = load_trace("noisy.jsonl")
    policy = Scaling(cooldown_s=cooldown_s)
    decisions = replay(samples, views(), policy)
    assert reversals(decisions, policy.window_s) == []
    assert 1 <= len(decisions) <= at_most
    assert {(d.action, d.before, d.after) for d in decisions} == {("scale_out", 2, 3)}
    assert all(b.t - a.t >= cooldown_s for a, b in itertools.pairwise(decisions))


def test_memory_climbing_is_raised_before_the_limit_and_within_bounds() -> None:
    samples = load_trace("memory_climb.jsonl")
    policy = Scaling()
    for t in sorted({s.t for s in samples}):
        decisions = decide(samples, views(memory=(256 * MI, 3 * GI)), policy, t)
        if decisions:
            break
    else:
        pytest.fail("memory climbing to the limit was never raised")
    [d] = decisions
    newest = max((s for s in samples if s.t <= t), key=lambda s: s.t)
    assert d.action == "resize_memory" and d.executor == "trainer-0"
    assert newest.rss < newest.memory == d.before
    assert d.signals["mem_util"] >= 0.875 and d.signals["rss"] < d.before
    assert d.before < d.after <= 3 * GI and d.after == int(d.before * policy.max_step.memory_factor)
    assert "raise" in d.reason and "limit" in d.reason
    # Close to the bound the raise is clamped to it, and at the bound there is nothing to do.
    climb = series("trainer-0", "trainer", memory=GI, mem=0.95, end=3.0)
    [clamped] = decide(climb, views(memory=(256 * MI, GI + 100 * MI)), policy, 3.0)
    assert clamped.after == GI + 100 * MI
    assert decide(climb, views(memory=(256 * MI, GI)), policy, 3.0) == []


# --- horizontal ------------------------------------------------------------------------------------


def test_starving_trainer_and_saturated_data_scale_out() -> None:
    [d] = decide(starving_picture(), views(), Scaling(), 30.0)
    assert (d.action, d.role, d.executor, d.before, d.after) == ("scale_out", "data", None, 2, 3)
    assert d.signals == {"starvation": 0.62, "cpu_util": 0.97}
    assert d.reason == (
        "trainers starved 62% of the time while data executors ran at 97% of their CPU: add 1 data executor"
    )
    assert Decision.from_dict(json.loads(json.dumps(d.to_dict()))) == d


def test_scale_out_respects_max_replicas_step_and_cooldown() -> None:
    picture = starving_picture()
    wide = Scaling.model_validate({"max_step": {"replicas": 5}})
    [d] = decide(picture, views(data_replicas=2, data_max=3), wide, 30.0)
    assert d.after == 3 and d.reason.endswith("add 1 data executor")
    [d] = decide(picture, views(data_replicas=2, data_max=6), wide, 30.0)
    assert d.after == 6 and d.reason.endswith("add 4 data executors")
    no_cpu = Scaling(actions=["scale_out", "scale_in", "resize_memory"])
    assert decide(picture, views(data_replicas=4, data_max=4), no_cpu, 30.0) == []
    # Replayed step by step with the trace unchanged: one scale-out per cooldown, never two within it.
    decisions = replay(starving_picture(end=60.0), views(data_max=8), Scaling())
    outs = [d for d in decisions if d.action == "scale_out"]
    assert outs and all(b.t - a.t >= Scaling().cooldown_s for a, b in itertools.pairwise(outs))
    recent = Decision(25.0, "scale_out", "data", None, 1, 2, "", {})
    assert decide(picture, views(), Scaling(), 30.0, [recent]) == []


def test_scale_out_not_possible_raises_data_cpu_within_bounds() -> None:
    no_out = Scaling(actions=["scale_in", "resize_cpu", "resize_memory"])
    decisions = decide(starving_picture(data_cpu=1.5), views(data_cpu=(0.5, 2.0)), no_out, 30.0)
    assert [(d.action, d.executor, d.before, d.after) for d in decisions] == [
        ("resize_cpu", "data-0", 1.5, 2.0),
        ("resize_cpu", "data-1", 1.5, 2.0),
    ]
    assert "scale_out not allowed" in decisions[0].reason
    at_max = decide(starving_picture(), views(data_replicas=4, data_max=4), Scaling(), 30.0)
    assert [(d.action, d.after) for d in at_max] == [("resize_cpu", 2.0), ("resize_cpu", 2.0)]
    assert "at max replicas" in at_max[0].reason
    assert decide(starving_picture(data_cpu=2.0), views(data_cpu=(0.5, 2.0)), no_out, 30.0) == []


def _idle_picture(rates: Iterable[float] = (90.0, 40.0, 90.0), mem: float = 0.5) -> list[Sample]:
    names = ("data-0", "data-1", "data-2")
    data = [
        s
        for n, r in zip(names, rates, strict=True)
        for s in series(n, "data", util=0.25, wait=0.7, rows_per_s=r, mem=mem)
    ]
    return [*series("trainer-0", "trainer", cpu=2.0, util=0.7, wait=0.02), *data]


def test_idle_data_executors_scale_in_the_slowest_never_below_min() -> None:
    roles = views(data_replicas=3, data_cpu=(1.0, 2.0))  # CPU at its floor: scale-in is the only move
    [d] = decide(_idle_picture(), roles, Scaling(), 30.0)
    assert (d.action, d.executor, d.before, d.after) == ("scale_in", "data-1", 3, 2)
    assert "remove the slowest, data-1" in d.reason and d.signals["credit_blocked"] == 0.7
    [tie] = decide(_idle_picture(rates=(50.0, 50.0, 50.0)), roles, Scaling(), 30.0)
    assert tie.executor == "data-2"
    assert (
        decide(_idle_picture(), {**roles, "data": replace(roles["data"], min_replicas=3)}, Scaling(), 30.0)
        == []
    )
    # No scale-in while trainers wait for data, nor right after a scale-out (no reversal).
    busy = [replace(s, wait_s=s.wait_s * 5) if s.role == "trainer" else s for s in _idle_picture()]
    assert decide(busy, roles, Scaling(), 30.0) == []
    out = Decision(24.0, "scale_out", "data", None, 2, 3, "", {})
    assert decide(_idle_picture(), roles, Scaling(cooldown_s=1.0), 30.0, [out]) == []
    # Two executors each waiting 55% on credit are idle, but one alone would have to work 90% of the
    # time: above the CPU target, so the trainers would soon starve and call for a scale-out again.
    pair = [
        *series("trainer-0", "trainer", cpu=2.0, util=0.7, wait=0.02),
        *series("data-0", "data", util=0.4, wait=0.55),
        *series("data-1", "data", util=0.4, wait=0.55),
    ]
    assert decide(pair, views(data_replicas=2, data_cpu=(1.0, 2.0)), Scaling(), 30.0) == []


def test_no_cpu_decision_until_a_window_after_a_horizontal_one() -> None:
    # The survivors of a scale-in also look over-provisioned, but only on the load from before it.
    # Memory does not move with load: theirs is lowered at once, the removed executor's is left alone.
    roles = views(data_replicas=3, data_cpu=(0.5, 2.0))
    first = decide(_idle_picture(mem=0.1), roles, Scaling(), 30.0)
    assert [(x.action, x.executor) for x in first] == [
        ("scale_in", "data-1"),
        ("resize_memory", "data-0"),
        ("resize_memory", "data-2"),
    ]
    [d] = decide(_idle_picture(), roles, Scaling(), 30.0)
    later = [s for s in _idle_picture() if s.executor != d.executor]
    assert decide(later, {**roles, "data": replace(roles["data"], replicas=2)}, Scaling(), 30.0, [d]) == []
    settled = decide(
        later, {**roles, "data": replace(roles["data"], replicas=2)}, Scaling(), 30.0, [replace(d, t=19.0)]
    )
    assert {(x.action, x.executor) for x in settled} == {("resize_cpu", "data-0"), ("resize_cpu", "data-2")}


# --- vertical --------------------------------------------------------------------------------------


def test_over_provisioned_trainer_cpu_lowered_not_below_min_and_not_when_starving() -> None:
    idle = series("trainer-0", "trainer", cpu=4.0, util=0.2, wait=0.05)  # uses 0.8 of 4 cores
    [d] = decide(idle, views(), Scaling(), 30.0)
    assert (d.action, d.before, d.after) == ("resize_cpu", 4.0, 1.15)  # 0.8 / (0.8 * 0.9), up to 0.05
    assert d.signals["cpu_util"] == 0.2 and "lower CPU to 1.15" in d.reason
    [floor] = decide(idle, views(trainer_cpu=(2.5, 4.0)), Scaling(), 30.0)
    assert floor.after == 2.5
    assert decide(idle, views(trainer_cpu=(4.0, 4.0)), Scaling(), 30.0) == []
    # Waiting on data executors that serve rows: data is catching up, the CPU stays.
    starving = series("trainer-0", "trainer", cpu=4.0, util=0.2, wait=0.6)
    feeding = series("data-0", "data", util=0.7, wait=0.1, rows_per_s=100.0)
    assert decide(starving + feeding, views(), Scaling(), 30.0) == []
    # Waiting with no data executor serving (a live stream caught up): idle CPU, given back.
    for caught_up in (starving, starving + series("data-0", "data", util=0.0, wait=0.0, rows_per_s=0.0)):
        [low] = [d for d in decide(caught_up, views(), Scaling(), 30.0) if d.role == "trainer"]
        assert (low.executor, low.action, low.after) == ("trainer-0", "resize_cpu", 1.15)
    barely = series("trainer-0", "trainer", cpu=0.55, util=0.3, wait=0.05)  # would save under 0.1 core
    assert decide(barely, views(), Scaling(), 30.0) == []


def test_over_provisioned_memory_lowered_and_compute_bound_trainer_raised() -> None:
    roomy = series("data-0", "data", memory=4 * GI, mem=0.1, util=0.7, wait=0.3)
    [d] = decide(roomy, views(), Scaling(), 30.0)
    assert (d.action, d.before, d.after) == ("resize_memory", 4 * GI, math.ceil(int(0.1 * 4 * GI) / 0.75))
    assert decide(roomy, views(memory=(int(3.3 * GI), 8 * GI)), Scaling(), 30.0) == []  # saves < 20%
    bound = series("trainer-0", "trainer", cpu=3.5, util=0.95, wait=0.02)
    [up] = decide(bound, views(trainer_cpu=(0.5, 4.0)), Scaling(), 30.0)
    assert (up.action, up.before, up.after) == ("resize_cpu", 3.5, 4.0) and "compute-bound" in up.reason


def test_vertical_cooldown_and_no_reversal_within_window() -> None:
    idle = series("trainer-0", "trainer", cpu=4.0, util=0.2, wait=0.05, end=60.0)
    raised = Decision(25.0, "resize_cpu", "trainer", "trainer-0", 3.0, 4.0, "", {})
    assert decide(idle, views(), Scaling(cooldown_s=1.0), 30.0, [raised]) == []  # reversal in window
    assert decide(idle, views(), Scaling(), 40.0, [replace(raised, t=30.0)]) == []  # cooldown
    assert len(decide(idle, views(), Scaling(cooldown_s=1.0), 30.0, [replace(raised, t=19.0)])) == 1
    # A memory raise ignores cooldown except for one second, and may follow a lowering.
    full = series("trainer-0", "trainer", memory=GI, mem=0.9)
    lowered = Decision(29.5, "resize_memory", "trainer", "trainer-0", 2 * GI, GI, "", {})
    assert decide(full, views(), Scaling(), 30.0, [lowered]) == []
    assert len(decide(full, views(), Scaling(), 30.0, [replace(lowered, t=28.5)])) == 1


# --- policy and window ------------------------------------------------------------------------------


def test_disabled_policy_or_action_not_allowed_yields_nothing() -> None:
    picture = [replace(s, rss=int(0.95 * GI)) if s.executor == "data-0" else s for s in starving_picture()]
    assert decide(picture, views(), Scaling(enabled=False), 30.0) == []
    assert decide(picture, views(), Scaling(actions=[]), 30.0) == []
    only_memory = decide(picture, views(), Scaling(actions=["resize_memory"]), 30.0)
    assert [d.action for d in only_memory] == ["resize_memory"]


def test_short_coverage_allows_only_the_memory_raise() -> None:
    window = Scaling().window_s
    young = [s for s in starving_picture() if s.t >= 30.0 - 0.8 * window + 1]  # spans 7 s of 10
    assert decide(young, views(), Scaling(), 30.0) == []
    old_enough = [s for s in starving_picture() if s.t >= 30.0 - 0.8 * window]
    assert [d.action for d in decide(old_enough, views(), Scaling(), 30.0)] == ["scale_out"]
    one_sample = series("trainer-0", "trainer", memory=GI, mem=0.9, start=30.0, end=30.0)
    [d] = decide(one_sample, views(), Scaling(), 30.0)
    assert d.action == "resize_memory"


def resized(before: Sequence[Sample], after: Sequence[Sample]) -> list[Sample]:
    """``after`` continues ``before``'s cumulative counters: one executor, resized in between."""
    last = before[-1]
    moved = [
        replace(
            s,
            cpu_s=s.cpu_s + last.cpu_s,
            rows=s.rows + last.rows,
            wait_s=s.wait_s + last.wait_s,
            busy_s=s.busy_s + last.busy_s,
        )
        for s in after
    ]
    return [*before, *moved]


def test_only_the_regime_since_the_last_resize_and_live_executors_count() -> None:
    # Lowered from 4 to 1.15 cores at t=21 and still over-provisioned: judged again only 8 s later.
    trace = resized(
        series("trainer-0", "trainer", cpu=4.0, util=0.2, wait=0.05, end=20.0),
        series("trainer-0", "trainer", cpu=1.15, util=0.2, wait=0.05, start=21.0, end=40.0),
    )
    assert decide(trace, views(trainer_cpu=(0.5, 4.0)), Scaling(), 28.0) == []
    [d] = decide(trace, views(trainer_cpu=(0.5, 4.0)), Scaling(), 29.0)
    assert (d.before, d.after, d.signals["cpu_util"]) == (1.15, 0.5, 0.2)
    gone = series("data-9", "data", util=0.2, wait=0.9, end=15.0)  # newest sample 15 s old: gone
    [out] = decide(starving_picture() + gone, views(), Scaling(), 30.0)
    assert out.signals["cpu_util"] == 0.97
    # The dying tail of an executor removed by a scale-in is not judged (nor does it block decisions).
    removed = Decision(20.0, "scale_in", "data", "data-9", 3, 2, "", {})
    tail = series("data-9", "data", util=0.2, wait=0.9, start=20.0, end=29.0)
    [out] = decide(starving_picture(end=40.0) + tail, views(), Scaling(), 36.0, [removed])
    assert out.action == "scale_out" and out.signals["cpu_util"] == 0.97


# --- closed loop -----------------------------------------------------------------------------------


@dataclass
class _Executor:
    name: str
    role: str
    cpu: float
    memory: int
    cpu_s: float = 0.0
    rows: float = 0.0
    wait_s: float = 0.0
    busy_s: float = 0.0


@dataclass
class _Pipeline:
    """Throughput = min(data capacity, trainer capacity); each side idles for the rest of its time.

    Costs are CPU seconds per row: a data executor with 1 core serves 110 rows/s, a trainer with
    1 core trains 100. The trainer's RSS grows towards 1.6 Gi from 0.5 (its limit starts at 1 Gi);
    data executors hold 200 Mi of their 1 Gi.
    """

    roles: dict[str, RoleView]
    executors: dict[str, _Executor] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    added: int = 0
    oom: list[float] = field(default_factory=list)

    DATA_COST = 1 / 110
    TRAIN_COST = 1 / 100

    def trainer_rss(self, t: float) -> int:
        return int(min(1.6 * GI, 0.5 * GI + 0.04 * GI * t))

    def start(self, role: str) -> None:
        view = self.roles[role]
        name = f"{role}-{self.added if role == 'data' else 0}"
        self.added += role == "data"
        self.executors[name] = _Executor(name, role, view.initial_cpu, view.initial_memory)

    def step(self, t: float, dt: float) -> None:
        data = [e for e in self.executors.values() if e.role == "data"]
        trainer = self.executors["trainer-0"]
        data_capacity = sum(e.cpu / self.DATA_COST for e in data)
        trainer_capacity = trainer.cpu / self.TRAIN_COST
        rate = min(data_capacity, trainer_capacity)
        trainer.cpu_s += rate * self.TRAIN_COST * dt
        trainer.rows += rate * dt
        trainer.busy_s += rate / trainer_capacity * dt
        trainer.wait_s += (1 - rate / trainer_capacity) * dt
        for e in data:
            share = rate * (e.cpu / self.DATA_COST) / data_capacity
            e.cpu_s += share * self.DATA_COST * dt
            e.rows += share * dt
            e.busy_s += rate / data_capacity * dt
            e.wait_s += (1 - rate / data_capacity) * dt
        for e in self.executors.values():
            rss = self.trainer_rss(t) if e.role == "trainer" else 200 * MI
            if rss >= e.memory:
                self.oom.append(t)
            self.samples.append(
                Sample(
                    t, e.name, e.role, e.cpu, e.memory, e.cpu_s, rss, 0, 0, int(e.rows), e.wait_s, e.busy_s
                )
            )

    def apply(self, d: Decision) -> None:
        view = self.roles[d.role]
        if d.action == "scale_out":
            for _ in range(int(d.after - d.before)):
                self.start("data")
        elif d.action == "scale_in":
            assert d.executor is not None
            del self.executors[d.executor]
        elif d.action == "resize_cpu":
            assert d.executor is not None
            self.executors[d.executor].cpu = d.after
        else:
            assert d.executor is not None
            self.executors[d.executor].memory = int(d.after)
        replicas = sum(e.role == d.role for e in self.executors.values())
        self.roles[d.role] = replace(view, replicas=replicas)


def test_closed_loop_converges_without_reversals() -> None:
    roles = views(data_replicas=1, data_max=4, data_cpu=(0.5, 1.0), trainer_cpu=(1.0, 3.0))
    roles["trainer"] = replace(roles["trainer"], initial_cpu=2.0)
    roles["data"] = replace(roles["data"], memory_range=(256 * MI, 2 * GI))
    sim = _Pipeline(roles)
    sim.start("trainer")
    sim.start("data")
    policy = Scaling()
    history: list[Decision] = []
    for tick in range(121):
        t = float(tick)
        sim.step(t, 1.0)
        kept = [s for s in sim.samples if s.t > t - 3 * policy.window_s]  # what the master keeps
        decisions = decide(kept, sim.roles, policy, t, history)
        for d in decisions:
            sim.apply(d)
        history += decisions

    assert reversals(history, policy.window_s) == []
    assert history and max(d.t for d in history) < 90.0, [d.to_dict() for d in history]  # settled
    assert sim.oom == []  # the climbing trainer memory was raised in time
    trainer = sim.executors["trainer-0"]
    data = [e for e in sim.executors.values() if e.role == "data"]
    assert trainer.cpu == 3.0 and len(data) == 3  # 3 trainer cores need 300 rows/s: 3 data executors
    assert all(e.memory < GI for e in data)  # 200 Mi of 1 Gi: lowered
    trained = [s for s in kept if s.executor == "trainer-0"]  # the last 30 s
    assert trained[-1].wait_s - trained[0].wait_s < 0.01  # the trainer no longer waits for data
    assert (trained[-1].rows - trained[0].rows) / (trained[-1].t - trained[0].t) == pytest.approx(300, abs=1)
    for d in history:
        view = sim.roles[d.role]
        if d.action == "resize_cpu":
            assert view.cpu_range[0] <= d.after <= view.cpu_range[1]
        if d.action in HORIZONTAL:
            assert view.min_replicas <= d.after <= view.max_replicas


def test_a_trainer_busy_with_a_stream_burst_gets_cpu_one_starved_by_data_executors_does_not() -> None:
    # At its CPU target and "waiting" 60% of the loop: on its own stream's fetch and decode (no data
    # executor serving rows), the trainer's CPU is the bottleneck.
    burst = series("trainer-0", "trainer", cpu=0.5, util=0.95, wait=0.6)
    idle_data = series("data-0", "data", util=0.02, wait=0.0, rows_per_s=0.0)
    [up] = [d for d in decide(burst + idle_data, views(), Scaling(), 30.0) if d.role == "trainer"]
    assert (up.executor, up.action, up.before, up.after) == ("trainer-0", "resize_cpu", 0.5, 1.5)
    # The same trainer while data executors serve it: the wait is theirs, the trainer keeps its CPU.
    serving = series("data-0", "data", util=0.5, wait=0.1, rows_per_s=100.0)
    assert [d for d in decide(burst + serving, views(), Scaling(), 30.0) if d.role == "trainer"] == []


def test_an_executor_whose_usage_is_unknown_is_never_taken_for_idle() -> None:
    # Zero CPU and memory would read as idle: lower its CPU and memory. Unknown, it is left alone.
    unknown = [
        dataclasses.replace(s, usage_known=False)
        for s in series("data-0", "data", util=0.0, mem=0.0, wait=0.0, rows_per_s=0.0)
    ]
    assert decide(unknown, views(data_replicas=1), Scaling(), 30.0) == []
    known = series("data-0", "data", util=0.0, mem=0.0, wait=0.0, rows_per_s=0.0)
    assert decide(known, views(data_replicas=1), Scaling(), 30.0) != []
