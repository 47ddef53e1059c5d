"""The training clock: what "now" is for freshness and the guard, and under ``clock: auto`` the moment
a replay of old data has become live training.

Separate from the guard: the clock has state of its own (under ``auto``: which clock is in force and
when it switched) that a checkpoint carries, so a resumed run goes on with the clock it had instead
of choosing again at a later wall-clock time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from airflow_provider_primus.contracts.training import Freshness

__all__ = ["ClockSwitch", "TrainingClock", "wall_ms"]

ClockName = Literal["wall", "replay"]
SwitchReason = Literal["live", "history_idle"]


def wall_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None


@dataclass(frozen=True)
class ClockSwitch:
    """``auto``'s one switch: what the job event and the summary say about it."""

    step: int  # steps trained before it (on the replay clock)
    watermark_ms: int  # the newest event time trained then
    lag_s: float | None  # how far that trailed the wall clock (None: nothing trained yet)
    reason: SwitchReason
    live_lag_s: float

    def payload(self) -> dict[str, Any]:
        """The ``ClockSwitched`` event's data (contracts/status.py ``ClockPayload``)."""
        return {
            "from_clock": "replay",
            "to_clock": "wall",
            "reason": self.reason,
            "step": self.step,
            "watermark": _iso(self.watermark_ms),
            "lag_s": round(self.lag_s, 3) if self.lag_s is not None else None,
            "live_lag_s": self.live_lag_s,
        }

    def message(self) -> str:
        if self.reason == "live":
            why = (
                f"the newest event trained ({_iso(self.watermark_ms)}) is {self.lag_s or 0.0:.0f} s behind "
                f"the wall clock, within live_lag_s ({self.live_lag_s:g} s)"
            )
        else:
            why = (
                "the history has nothing more to train now while the replay holds stream records "
                "back: waiting for it would starve live data"
            )
        return f"clock auto: replay -> wall after step {self.step}: {why}"


class TrainingClock:
    """``wall``: now is the wall clock. ``replay``: now is the newest event time trained (the
    watermark), and the replay gate holds back stream records beyond the history. ``auto``: replay
    until the data is live, then wall, switching once."""

    def __init__(self, freshness: Freshness, wall: Callable[[], int] = wall_ms) -> None:
        self.setting = freshness.clock
        self.live_lag_s = freshness.live_lag_s
        self.in_force: ClockName = "wall" if self.setting == "wall" else "replay"
        self.switch: ClockSwitch | None = None
        self._wall = wall

    @property
    def replay(self) -> bool:
        return self.in_force == "replay"

    def now_ms(self, watermark_ms: int) -> int:
        """Now, for freshness and the guard's age check: the wall clock, or in a replay the newest
        event time trained so far (``watermark_ms``: the replayed world's "now" as far as the model
        knows it)."""
        return self._wall() if self.in_force == "wall" else watermark_ms

    def observe(self, step: int, watermark_ms: int) -> ClockSwitch | None:
        """Before each step: under ``auto`` in a replay, the switch once the watermark is within
        ``live_lag_s`` of the wall clock (nothing trained yet says nothing about the data's age)."""
        if not self._may_switch() or not watermark_ms:
            return None
        lag_s = (self._wall() - watermark_ms) / 1000.0
        return self._go_live(step, watermark_ms, lag_s, "live") if lag_s <= self.live_lag_s else None

    def history_idle(self, step: int, watermark_ms: int) -> ClockSwitch | None:
        """An idle step while the replay gate holds stream records back: the history cannot reach
        them now (an open graph waiting for its next window), so a replay would never catch up with
        the present; under ``auto`` the data is live."""
        if not self._may_switch():
            return None
        lag_s = (self._wall() - watermark_ms) / 1000.0 if watermark_ms else None
        return self._go_live(step, watermark_ms, lag_s, "history_idle")

    def summary(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "in_force": self.in_force,
            "switched": self.switch.payload() if self.switch is not None else None,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "in_force": self.in_force,
            "switch": asdict(self.switch) if self.switch is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Only ``auto`` has state; a checkpoint from an explicit clock (or from before ``auto``)
        leaves the choice to be made afresh, from the restored watermark."""
        if self.setting != "auto" or not state or state.get("setting") != "auto":
            return
        self.in_force = "wall" if state["in_force"] == "wall" else "replay"
        switch = state.get("switch")
        self.switch = ClockSwitch(**switch) if switch else None

    def _may_switch(self) -> bool:
        return self.setting == "auto" and self.in_force == "replay"

    def _go_live(
        self, step: int, watermark_ms: int, lag_s: float | None, reason: SwitchReason
    ) -> ClockSwitch:
        self.in_force = "wall"
        self.switch = ClockSwitch(step, watermark_ms, lag_s, reason, self.live_lag_s)
        return self.switch
