"""Evaluation metrics over whole passes: AUC, log loss, and a bounded-memory freshness distribution.

Everything is whole-array numpy: an evaluation pass scores millions of rows, and per-row Python
would cost more than the forward passes that produced the scores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Percentiles", "ScoreLog", "auc", "logloss"]

_F32 = np.ndarray[Any, np.dtype[np.float32]]
_F64 = np.ndarray[Any, np.dtype[np.float64]]


def _pair(labels: np.ndarray[Any, Any], values: np.ndarray[Any, Any]) -> tuple[_F64, _F64]:
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if y.shape != v.shape:
        raise ValueError(f"labels ({y.size} values) and scores ({v.size} values) differ in length")
    return y, v


def auc(labels: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]) -> float:
    """ROC AUC as the Mann-Whitney U statistic: one sort, tied scores share their average rank.

    Labels above 0.5 are positives. ``nan`` when only one class is present (AUC is undefined) and
    when any score is NaN: a diverged model should not report a plausible number.
    """
    y, s = _pair(labels, scores)
    positive = y > 0.5
    n_pos = int(np.count_nonzero(positive))
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0 or np.isnan(s).any():
        return float("nan")
    order = np.argsort(s, kind="stable")
    sorted_scores = s[order]
    # Tie groups in the sorted order: ranks start..end (1-based) all get (start + end) / 2.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], s.size]
    group_rank = (starts + 1 + ends) / 2.0
    ranks = np.repeat(group_rank, ends - starts)
    rank_sum = float(ranks[positive[order]].sum())
    u = rank_sum - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def logloss(labels: np.ndarray[Any, Any], probs: np.ndarray[Any, Any], eps: float = 1e-7) -> float:
    """Mean binary cross-entropy; probabilities are clipped so one confident miss stays finite."""
    y, p = _pair(labels, probs)
    if y.size == 0:
        return float("nan")
    p = np.clip(p, eps, 1.0 - eps)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def _as_f32(values: np.ndarray[Any, Any]) -> _F32:
    # A copy: the caller may reuse its buffer for the next step. Read-only: windows are views of it.
    out = np.array(values, dtype=np.float32).reshape(-1)
    out.flags.writeable = False
    return out


class ScoreLog:
    """(label, probability) rows appended step by step, read as whole arrays or recent windows.

    Appends only list their chunks; the first read concatenates once and keeps the result, so a
    step costs O(batch) however long the log. Arrays handed out are read-only views of that result.
    """

    def __init__(self) -> None:
        self._labels: list[_F32] = []
        self._probs: list[_F32] = []
        self._rows = 0

    def append(self, labels: np.ndarray[Any, Any], probs: np.ndarray[Any, Any]) -> None:
        y, p = _as_f32(labels), _as_f32(probs)
        if y.shape != p.shape:
            raise ValueError(f"labels ({y.size} values) and probs ({p.size} values) differ in length")
        self._labels.append(y)
        self._probs.append(p)
        self._rows += y.size

    def __len__(self) -> int:
        return self._rows

    def _arrays(self) -> tuple[_F32, _F32]:
        if len(self._labels) != 1:
            for chunks in (self._labels, self._probs):
                joined = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.float32)
                joined.flags.writeable = False
                chunks[:] = [joined]
        return self._labels[0], self._probs[0]

    def window(self, n: int) -> tuple[_F32, _F32]:
        """The last ``n`` rows (all of them when fewer were logged)."""
        if n < 0:
            raise ValueError(f"window size must be >= 0, got {n}")
        y, p = self._arrays()
        start = max(0, y.size - n)
        return y[start:], p[start:]

    def auc(self) -> float:
        return auc(*self._arrays())

    def logloss(self) -> float:
        return logloss(*self._arrays())

    def window_auc(self, n: int) -> float:
        return auc(*self.window(n))

    def window_logloss(self, n: int) -> float:
        return logloss(*self.window(n))

    def state_dict(self) -> dict[str, Any]:
        y, p = self._arrays()
        return {"labels": y.copy(), "probs": p.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        y, p = _as_f32(state["labels"]), _as_f32(state["probs"])
        if y.shape != p.shape:
            raise ValueError(f"labels ({y.size} values) and probs ({p.size} values) differ in length")
        self._labels, self._probs, self._rows = [y], [p], y.size


class Percentiles:
    """Quantiles of an unbounded stream (freshness, in seconds) in bounded memory.

    A uniform reservoir sample of ``size`` values answers quantiles (exactly while fewer values
    than ``size`` have been added); count, min and max are tracked exactly. Non-finite values are
    dropped: an unknown freshness is no evidence about the distribution. The RNG state is part of
    :meth:`state_dict`, so a resumed run samples as the uninterrupted one would have.
    """

    def __init__(self, size: int = 100_000, seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"reservoir size must be >= 1, got {size}")
        self.size = size
        self._rng = np.random.default_rng(seed)
        self._sample: _F64 = np.empty(size, dtype=np.float64)
        self._count = 0
        self._min = float("inf")
        self._max = float("-inf")

    @property
    def count(self) -> int:
        return self._count

    @property
    def min(self) -> float:
        return self._min if self._count else float("nan")

    @property
    def max(self) -> float:
        return self._max if self._count else float("nan")

    def __len__(self) -> int:
        return self._count

    def add(self, values: np.ndarray[Any, Any]) -> None:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        self._min = min(self._min, float(v.min()))
        self._max = max(self._max, float(v.max()))
        filled = min(self._count, self.size)
        direct = min(self.size - filled, v.size)
        self._sample[filled : filled + direct] = v[:direct]
        rest = v[direct:]
        if rest.size:
            # Algorithm R: the value at (0-based) stream index i replaces a uniform slot of [0, i]
            # when that slot is inside the reservoir. One float per value (not integers(0, i + 1))
            # keeps the draws independent of how the stream was split into add() calls.
            seen = self._count + direct + np.arange(1, rest.size + 1, dtype=np.float64)
            slots = np.floor(self._rng.random(rest.size) * seen).astype(np.int64)
            keep = slots < self.size
            slots, kept = slots[keep], rest[keep]
            # Sequential semantics: of several values drawn to one slot, the last one stays.
            last_first_slots, last_first_index = np.unique(slots[::-1], return_index=True)
            self._sample[last_first_slots] = kept[::-1][last_first_index]
        self._count += v.size

    def quantile(self, q: float) -> float:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if self._count == 0:
            return float("nan")
        if q == 0.0:
            return self._min
        if q == 1.0:
            return self._max
        return float(np.quantile(self._sample[: min(self._count, self.size)], q))

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self._count,
            "min": self._min,
            "max": self._max,
            "sample": self._sample[: min(self._count, self.size)].copy(),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["size"]) != self.size:
            raise ValueError(
                f"state is for a reservoir of {state['size']} values, this one holds {self.size}"
            )
        sample = np.asarray(state["sample"], dtype=np.float64).reshape(-1)
        count = int(state["count"])
        if sample.size != min(count, self.size):
            raise ValueError(f"state holds {sample.size} sampled values for a count of {count}")
        self._sample[: sample.size] = sample
        self._count = count
        self._min, self._max = float(state["min"]), float(state["max"])
        self._rng.bit_generator.state = state["rng"]
