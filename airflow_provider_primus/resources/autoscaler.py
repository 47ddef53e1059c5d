"""Autoscaler: a telemetry window and the job's scaling policy in, scaling decisions out.

A pure function on purpose (no clock, no I/O, no state of its own; the master hands earlier decisions
back as ``history``): a recorded trace replays to the same decisions, so every rule is unit-tested on
traces instead of on live processes, and a decision in the events log can be re-derived afterwards.

Stability comes before speed. Every rule except the memory raise judges an executor only on telemetry
spanning most of a window since its last resize; thresholds leave gaps between raising and lowering,
and lowered or removed capacity lands inside the gap, so a steady workload settles and stays settled;
``history`` gives cooldowns and forbids reversing a decision within a window. Memory is the exception
because a limit reached is an OOM kill, not a slowdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_primus.contracts.job import Scaling
from airflow_provider_primus.resources.telemetry import Sample

COVERAGE = 0.8  # share of window_s an executor's current regime must span before it is judged
MEMORY_GAP_S = 1.0  # the only quiet time a memory raise respects
CREDIT_IDLE = 0.5  # a data executor blocked on credit more than this is idle
# Lowered CPU and the survivors of a scale-in land at this share of the CPU target, not on it: landing
# on the raise threshold would let measurement noise trip the raise rule and start a slow oscillation.
LANDING = 0.9
HORIZONTAL = ("scale_out", "scale_in")


@dataclass(frozen=True)
class RoleView:
    name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    cpu_range: tuple[float, float]
    memory_range: tuple[int, int]
    initial_cpu: float
    initial_memory: int


@dataclass(frozen=True)
class Decision:
    t: float
    action: str
    role: str
    executor: str | None
    before: float
    after: float
    reason: str
    signals: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        executor = d.get("executor")
        return cls(
            t=float(d["t"]),
            action=str(d["action"]),
            role=str(d["role"]),
            executor=None if executor is None else str(executor),
            before=float(d["before"]),
            after=float(d["after"]),
            reason=str(d["reason"]),
            signals={str(k): float(v) for k, v in dict(d.get("signals") or {}).items()},
        )


@dataclass(frozen=True)
class _Signals:
    executor: str
    role: str
    cpu: float
    memory: int
    span: float
    used_cores: float
    cpu_util: float
    rss: int
    mem_util: float
    rows_per_s: float
    starvation: float
    credit_blocked: float
    usage_known: bool


def _signals(samples: Sequence[Sample]) -> _Signals:
    """Rates over the current regime only: before a resize the same load meant a different utilisation."""
    last = samples[-1]
    start = len(samples) - 1
    while start > 0 and (samples[start - 1].cpu, samples[start - 1].memory) == (last.cpu, last.memory):
        start -= 1
    first, regime = samples[start], samples[start:]
    span = last.t - first.t
    used = max(0.0, last.cpu_s - first.cpu_s) / span if span > 0 else 0.0
    wait, busy = last.wait_s - first.wait_s, last.busy_s - first.busy_s
    rss = max(s.rss for s in regime)
    return _Signals(
        executor=last.executor,
        role=last.role,
        cpu=last.cpu,
        memory=last.memory,
        span=span,
        used_cores=used,
        cpu_util=used / last.cpu if last.cpu > 0 else 0.0,
        rss=rss,
        mem_util=rss / last.memory if last.memory > 0 else 0.0,
        rows_per_s=(last.rows - first.rows) / span if span > 0 else 0.0,
        starvation=wait / (wait + busy) if wait + busy > 0 else 0.0,
        credit_blocked=wait / span if span > 0 else 0.0,
        usage_known=all(s.usage_known for s in regime),
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _mi(size: float) -> str:
    return f"{size / 2**20:.0f}Mi"


def _ceil_05(cores: float) -> float:
    return round(math.ceil(round(cores / 0.05, 6)) * 0.05, 3)


class _Planner:
    """One ``decide`` call: the guards that need history, and the decisions taken so far."""

    def __init__(
        self, policy: Scaling, roles: Mapping[str, RoleView], now: float, history: Sequence[Decision]
    ):
        self.policy, self.roles, self.now = policy, roles, now
        self.history = [d for d in history if d.t <= now]
        self.decisions: list[Decision] = []

    def quiet(self, action: str, role: str, executor: str | None, up: bool) -> bool:
        """Cooldown since the last like decision, and no reversal of one taken within the window."""
        # A memory raise waits only a second and may reverse a lowering: an OOM kill costs more.
        urgent = action == "resize_memory" and up
        cooldown = MEMORY_GAP_S if urgent else self.policy.cooldown_s
        for d in self.history:
            if action in HORIZONTAL:
                if d.action not in HORIZONTAL or d.role != role:
                    continue
            elif d.action != action or d.executor != executor:
                continue
            age, reversal = self.now - d.t, (d.after > d.before) != up
            if age < cooldown or (reversal and not urgent and age < self.policy.window_s):
                return False
        return True

    def settled(self) -> bool:
        """No CPU decision until a window has passed since the last horizontal one: adding or removing
        executors moves load, and a window still holding the old load would misjudge every executor."""
        recent = [*self.history, *self.decisions]
        return not any(d.action in HORIZONTAL and self.now - d.t < self.policy.window_s for d in recent)

    def emit(
        self,
        action: str,
        role: str,
        executor: str | None,
        change: tuple[float, float],
        *,
        why: str,
        **sig: float,
    ) -> None:
        before, after = change
        if before == after or action not in self.policy.actions:
            return
        if not self.quiet(action, role, executor, after > before):
            return
        if action == "resize_cpu" and not self.settled():
            return
        signals = {k: round(v, 3) for k, v in sig.items()}
        self.decisions.append(Decision(self.now, action, role, executor, before, after, why, signals))

    def raise_cpu(self, s: _Signals, why: str, **sig: float) -> None:
        new = round(min(self.roles[s.role].cpu_range[1], s.cpu + self.policy.max_step.cpu), 3)
        if new > s.cpu:
            why = f"{why}: raise {s.executor} CPU from {s.cpu:g} to {new:g} cores"
            self.emit("resize_cpu", s.role, s.executor, (s.cpu, new), why=why, **sig)

    def raise_memory(self, s: _Signals) -> None:
        target = self.policy.targets.memory_utilization
        threshold = target + (1 - target) / 2
        top = self.roles[s.role].memory_range[1]
        new = min(top, max(int(s.memory * self.policy.max_step.memory_factor), math.ceil(s.rss / target)))
        if s.mem_util >= threshold and new > s.memory:
            why = (
                f"{s.executor} memory reached {s.mem_util:.0%} of its limit (raise at {threshold:.0%}): "
                f"raise it from {_mi(s.memory)} to {_mi(new)} before the limit is hit"
            )
            sig = {"mem_util": s.mem_util, "rss": s.rss}
            self.emit("resize_memory", s.role, s.executor, (s.memory, new), why=why, **sig)

    def data_horizontal(self, data: Sequence[_Signals], trainers: Sequence[_Signals]) -> None:
        targets, view, n = self.policy.targets, self.roles["data"], self.roles["data"].replicas
        starvation = _mean([t.starvation for t in trainers])
        util = _mean([d.cpu_util for d in data])
        if starvation > targets.starvation and util >= targets.cpu_utilization:
            why = f"trainers starved {starvation:.0%} of the time while data executors ran at {util:.0%}"
            why += " of their CPU"
            room = view.max_replicas - n
            if "scale_out" in self.policy.actions and room > 0:
                # Sized to the shortfall: trainers waiting a share w of the time get data at (1 - w)
                # of the rate they consume, so about n * w / (1 - w) more executors close the gap.
                shortfall = math.ceil(n * starvation / max(1e-6, 1 - starvation) - 1e-9)
                step = max(1, min(self.policy.max_step.replicas, room, shortfall))
                why = f"{why}: add {step} data executor{'s' if step > 1 else ''}"
                sig = {"starvation": starvation, "cpu_util": util}
                self.emit("scale_out", "data", None, (n, n + step), why=why, **sig)
                return
            why = f"{why} ({'data executors at max replicas' if room <= 0 else 'scale_out not allowed'})"
            for d in data:
                if d.cpu_util >= targets.cpu_utilization:
                    self.raise_cpu(d, why, starvation=starvation, cpu_util=util, executor_cpu_util=d.cpu_util)
            return
        idle = min(d.credit_blocked for d in data)
        if starvation >= targets.starvation / 4 or idle <= CREDIT_IDLE or n <= view.min_replicas:
            return
        # min() keeps the first of equals, so sorting by name descending breaks ties towards the highest.
        victim = min(sorted(data, key=lambda d: d.executor, reverse=True), key=lambda d: d.rows_per_s)
        survivors = [d for d in data if d is not victim]
        if not survivors:
            return
        # What the survivors would carry: scale in only if it leaves them inside the band, not at its top.
        load = max(
            sum(d.used_cores for d in data) / sum(d.cpu for d in survivors),
            sum(1 - d.credit_blocked for d in data) / len(survivors),
        )
        if load <= LANDING * targets.cpu_utilization:
            why = (
                f"trainers starved only {starvation:.0%} of the time while every data executor waited on "
                f"credit at least {idle:.0%} of it: remove the slowest, {victim.executor}"
            )
            sig = {"starvation": starvation, "credit_blocked": idle, "rows_per_s": victim.rows_per_s}
            self.emit("scale_in", "data", victim.executor, (n, n - 1), why=why, load_after=load, **sig)

    def lower(self, s: _Signals, data_flowing: bool = True) -> None:
        """Give back what an executor does not use, landing inside the band so noise cannot raise it again.

        ``data_flowing``: some data executor served rows within the window. Without that, a trainer's
        waiting is on its sources themselves (a live stream it has caught up with), not on the data
        service: no data is about to catch up, so its idle CPU is idle, and the next burst raises it."""
        targets = self.policy.targets
        # A starving trainer's CPU is idle because of data; taking it away would hurt once data catches up.
        starving = s.role == "trainer" and s.starvation > targets.starvation and data_flowing
        if s.cpu_util < targets.cpu_utilization / 2 and not starving:
            need = _ceil_05(s.used_cores / (LANDING * targets.cpu_utilization))
            new = max(self.roles[s.role].cpu_range[0], need)
            if new <= min(s.cpu - 0.1, s.cpu * 0.9) + 1e-9:
                why = f"{s.executor} used {s.cpu_util:.0%} of its {s.cpu:g} cores: lower CPU to {new:g}"
                sig = {"cpu_util": s.cpu_util, "used_cores": s.used_cores, "starvation": s.starvation}
                self.emit("resize_cpu", s.role, s.executor, (s.cpu, new), why=why, **sig)
        floor = max(self.roles[s.role].memory_range[0], math.ceil(s.rss / targets.memory_utilization))
        if 0 < s.mem_util < targets.memory_utilization / 2 and floor <= 0.8 * s.memory:
            why = (
                f"{s.executor} used at most {s.mem_util:.0%} of its memory: "
                f"lower the limit from {_mi(s.memory)} to {_mi(floor)}"
            )
            sig = {"mem_util": s.mem_util, "rss": s.rss}
            self.emit("resize_memory", s.role, s.executor, (s.memory, floor), why=why, **sig)


def decide(
    samples: Sequence[Sample],
    roles: Mapping[str, RoleView],
    policy: Scaling,
    now: float,
    history: Sequence[Decision] = (),
) -> list[Decision]:
    """The decisions the policy calls for at ``now``; applying them is the master's business.

    Executors with no sample within ``window_s`` of ``now`` are gone and ignored; so is the dying tail
    of one removed by an earlier scale-in (for a window after that decision).
    """
    if not policy.enabled:
        return []
    window = policy.window_s
    removed = {d.executor: d.t for d in history if d.action == "scale_in" and d.t <= now and d.executor}
    per_executor: dict[str, list[Sample]] = {}
    for sample in sorted(samples, key=lambda x: x.t):
        if not now - window <= sample.t <= now or sample.role not in roles:
            continue
        if sample.executor in removed and sample.t < removed[sample.executor] + window:
            continue
        per_executor.setdefault(sample.executor, []).append(sample)
    # An executor whose CPU and memory use is unknown is not judged at all: no data is not idle.
    signals = [s for s in (_signals(per_executor[name]) for name in sorted(per_executor)) if s.usage_known]
    plan = _Planner(policy, roles, now, history)
    for s in signals:
        plan.raise_memory(s)

    judged = [s for s in signals if s.span >= COVERAGE * window]
    data = [s for s in signals if s.role == "data"]
    trainers = [s for s in signals if s.role == "trainer"]
    # Horizontal decisions need the whole picture: a data executor or trainer still filling its window
    # (just added, just resized) would otherwise be judged on a fraction of its behaviour.
    if "data" in roles and data and trainers and all(s.span >= COVERAGE * window for s in (*data, *trainers)):
        plan.data_horizontal(data, trainers)

    targets = policy.targets
    scaled_in = {d.executor for d in plan.decisions if d.action == "scale_in"}
    # Over the whole window, not a regime: an executor resized or launched a moment ago has served
    # nothing in its new regime yet, which says nothing about whether data is flowing.
    data_flowing = any(
        ss[-1].rows > ss[0].rows for ss in per_executor.values() if ss and ss[0].role == "data"
    )
    for s in judged:
        # With no rows coming from the data service, a trainer's waiting is on its own stream, whose
        # fetch and decode run on the trainer's CPU (a burst of events): at its CPU target it is
        # compute-bound however much of its time the training loop spent waiting for them.
        waiting_ok = s.starvation < targets.starvation / 2 or not data_flowing
        compute_bound = s.cpu_util >= targets.cpu_utilization and waiting_ok
        if s.role == "trainer" and compute_bound:
            why = f"trainer {s.executor} is compute-bound ({s.cpu_util:.0%} CPU, starved {s.starvation:.0%})"
            plan.raise_cpu(s, why, cpu_util=s.cpu_util, starvation=s.starvation)
        elif s.executor not in scaled_in:
            plan.lower(s, data_flowing)
    return plan.decisions
