"""The mixing policy: how many rows of each source go into the next training step.

A pure class (no I/O, no clock) so every rule is unit-testable and a checkpoint can hold its state:

- **Weights** set each source's share of a step; fractional remainders carry over between steps, so
  long-run shares match the weights exactly instead of drifting by rounding.
- **Freshness guard**: while the stream lags beyond its SLO its share rises to ``max_share``; the
  other sources give up rows in proportion to their weights. Those rows are *deferred*: they stay in
  their source (the data service holds them under backpressure) and are trained later.
- **Idle capacity**: rows a source cannot supply now (an idle stream, a finished window) go to the
  sources that can, highest priority first, so a step is full whenever any data is ready.
- **Caps** bound a source's share of rows over the last ``window_steps`` steps, so a traffic spike
  cannot take over the model however far behind the stream is.
- **Scored-only sources** (the stream in ``batch`` mode) take no part in the split: the trained
  sources share every step as if they were alone, guard off, and a scored source's rows come on top,
  at the pace its weight gives it relative to the rows trained (once nothing is left to train, a
  whole step's worth). So the stream is scored alongside the history it follows, as in ``mixed``
  mode, yet its presence, lag or absence never changes what history is trained.
- **Replay** sources (history drawn again, ``mixing.replay``) take a fixed share of the step off the
  top, and only alongside rows of the other trained sources, at their pace: an idle stream with
  history done gives a step of nothing, never a step of replay alone.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_primus.contracts.data import MixtureEntry
from airflow_provider_primus.contracts.training import TrainingSpec

__all__ = ["MixPolicy", "SourcePolicy", "StepPlan", "policy_for"]


@dataclass(frozen=True)
class SourcePolicy:
    name: str
    weight: float
    priority: int = 0
    cap: float = 1.0
    stream: bool = False
    trained: bool = True  # False: its rows are only scored (the stream in batch mode)
    replay_share: float = 0.0  # > 0: a replay of history, this share of every step


@dataclass
class StepPlan:
    rows: dict[str, int]
    guard: bool
    deferred: dict[str, int] = field(default_factory=dict)


class MixPolicy:
    def __init__(
        self, sources: list[SourcePolicy], *, batch_size: int, window_steps: int, max_stream_share: float
    ) -> None:
        if not sources:
            raise ValueError("a mixture needs at least one source")
        self.sources = {s.name: s for s in sources}
        self.batch_size = batch_size
        self.window_steps = window_steps
        self.max_stream_share = max_stream_share
        self._carry: dict[str, float] = {s.name: 0.0 for s in sources}
        self._window: collections.deque[dict[str, int]] = collections.deque(maxlen=max(1, window_steps - 1))
        # Fill order for spare capacity: priority (higher first), then weight, then name.
        self._fill_order = sorted(sources, key=lambda s: (-s.priority, -s.weight, s.name))

    def shares(self, active: list[str], guard: bool) -> dict[str, float]:
        """Target share per active source before availability and caps."""
        total = sum(self.sources[n].weight for n in active)
        shares = {n: self.sources[n].weight / total for n in active}
        streams = [n for n in active if self.sources[n].stream]
        if guard and streams and len(active) > len(streams):
            boosted = {n: max(shares[n], self.max_stream_share / len(streams)) for n in streams}
            rest = [n for n in active if n not in boosted]
            remaining = max(0.0, 1.0 - sum(boosted.values()))
            rest_weight = sum(self.sources[n].weight for n in rest)
            shares = {**boosted, **{n: remaining * self.sources[n].weight / rest_weight for n in rest}}
        return shares

    def _cap_room(self, name: str) -> int:
        cap = self.sources[name].cap
        if cap >= 1.0:
            return self.batch_size
        window_total = sum(sum(step.values()) for step in self._window)
        window_rows = sum(step.get(name, 0) for step in self._window)
        return max(0, math.floor(cap * (window_total + self.batch_size)) - window_rows)

    def plan(self, available: Mapping[str, int], active: list[str], *, guard: bool) -> StepPlan:
        """Rows per source for one step. ``available``: rows each source can hand over now;
        ``active``: sources not finished (an idle stream is active with 0 available)."""
        active = [n for n in self.sources if n in active]
        if not active:
            return StepPlan({}, guard)
        replays = [n for n in active if self.sources[n].replay_share > 0]
        trained = [n for n in active if self.sources[n].trained and n not in replays]
        # The guard protects a stream the model learns from; with none among the trained sources
        # there is nothing for history to give way to.
        guard = guard and any(self.sources[n].stream for n in trained)
        room = sum(
            math.floor(self.sources[n].replay_share * self.batch_size)
            for n in replays
            if available.get(n, 0) > 0
        )
        size = self.batch_size - room
        rows, deferred = self._split(available, trained, guard, size) if trained else ({}, {})
        trained_rows = sum(rows.values())
        for n in replays:
            rows[n] = self._replay_rows(n, available.get(n, 0), trained_rows, size)
        self._window.append({n: r for n, r in rows.items() if r})
        for n in active:
            if not self.sources[n].trained:
                rows[n] = self._scored_rows(n, available.get(n, 0), trained, trained_rows)
        return StepPlan({n: r for n, r in rows.items() if r}, guard, deferred)

    def _replay_rows(self, name: str, available: int, trained_rows: int, size: int) -> int:
        """A replay's rows: its share of a full step when the others fill theirs, proportionally
        fewer when they cannot (rounding carried over)."""
        if not available or not trained_rows:
            return 0
        share = self.sources[name].replay_share
        exact = min(trained_rows, size) * share / (1.0 - share) + self._carry[name]
        wanted = max(0, math.floor(exact))
        rows = min(wanted, available)
        self._carry[name] = exact - wanted if rows == wanted else 0.0
        return rows

    def _scored_rows(self, name: str, available: int, trained: list[str], trained_rows: int) -> int:
        """A scored-only source's rows: its weight's pace relative to the rows trained this step
        (rounding carried over), or a whole step when nothing is trained (no trained source left,
        or a followed one idle until its next window)."""
        if trained and trained_rows:
            weight = sum(self.sources[n].weight for n in trained)
            exact = trained_rows * self.sources[name].weight / weight + self._carry[name]
        else:
            exact = float(self.batch_size)
        wanted = max(0, math.floor(exact))
        rows = min(wanted, available)
        self._carry[name] = exact - wanted if rows == wanted and trained and trained_rows else 0.0
        return rows

    def _split(
        self, available: Mapping[str, int], active: list[str], guard: bool, size: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        """``size`` rows (the step less a replay's share) between the trained sources, and the
        rows the guard deferred."""
        shares = self.shares(active, guard)
        wanted: dict[str, int] = {}
        exact = {n: shares[n] * size + self._carry[n] for n in active}
        for n in active:
            wanted[n] = max(0, math.floor(exact[n]))
        leftover = size - sum(wanted.values())
        by_fraction = sorted(
            active, key=lambda n: (-(exact[n] - math.floor(exact[n])), -self.sources[n].priority, n)
        )
        for n in by_fraction[: max(0, leftover)]:
            wanted[n] += 1
        rows = {n: min(wanted[n], available.get(n, 0), self._cap_room(n)) for n in active}
        for n in active:
            # Carry only rounding, not unmet demand: a source that could not deliver does not get a
            # burst later, it simply had less data.
            self._carry[n] = max(-1.0, min(1.0, exact[n] - wanted[n])) if rows[n] == wanted[n] else 0.0
        spare = size - sum(rows.values())
        # Spare capacity goes to whoever has data, within caps; a cap never leaves a step short when
        # no other source has data to offer (it bounds a share, it is not a rate limit).
        for capped in (True, False):
            for source in self._fill_order:
                n = source.name
                if spare <= 0 or n not in rows:
                    continue
                room = self._cap_room(n) - rows[n] if capped else spare
                extra = min(spare, available.get(n, 0) - rows[n], room)
                if extra > 0:
                    rows[n] += extra
                    spare -= extra
        deferred: dict[str, int] = {}
        if guard:
            base = self.shares(active, guard=False)
            for n in active:
                if not self.sources[n].stream:
                    short = math.floor(base[n] * size) - rows[n]
                    if short > 0 and available.get(n, 0) >= math.floor(base[n] * size):
                        deferred[n] = short
        return rows, deferred

    def state_dict(self) -> dict[str, Any]:
        return {"carry": dict(self._carry), "window": [dict(w) for w in self._window]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._carry.update({k: float(v) for k, v in state["carry"].items() if k in self._carry})
        self._window.clear()
        self._window.extend(dict(w) for w in state["window"])


def policy_for(
    streams: Mapping[str, bool],
    mixture: Sequence[MixtureEntry],
    spec: TrainingSpec,
    scored_only: Collection[str] = (),
    replays: Collection[str] = (),
) -> MixPolicy:
    """The policy for these feeds (name -> whether it is a stream, in feed order): weights and
    priorities from the data's mixture, caps and the stream's share from the training spec; a source
    the mixture does not name weighs 1.0 at priority 0. ``scored_only``: sources the mode scores
    but never trains (the stream in ``batch`` mode); ``replays``: replay feeds, at
    ``mixing.replay.share`` of each step."""
    weights = {m.source: m for m in mixture}
    policies = []
    for name, stream in streams.items():
        entry = weights.get(name)
        control = spec.mixing.sources.get(name)
        policies.append(
            SourcePolicy(
                name=name,
                weight=entry.weight if entry else 1.0,
                priority=entry.priority if entry else 0,
                cap=control.cap if control else 1.0,
                stream=stream,
                trained=name not in scored_only,
                replay_share=spec.mixing.replay.share if name in replays else 0.0,
            )
        )
    return MixPolicy(
        policies,
        batch_size=spec.batch_size,
        window_steps=spec.mixing.window_steps,
        max_stream_share=spec.mixing.freshness.max_share,
    )
