"""AUC against a brute-force pairwise count, log loss against its formula, ScoreLog and Percentiles."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from airflow_provider_primus.training.metrics import Percentiles, ScoreLog, auc, logloss


def pairwise_auc(labels: np.ndarray[Any, Any], scores: np.ndarray[Any, Any]) -> float:
    pos = scores[labels > 0.5]
    neg = scores[labels <= 0.5]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (pos.size * neg.size))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [2, 7, 100, 1000])
def test_auc_matches_pairwise_count_with_ties(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.float32)
    labels[:2] = [0.0, 1.0]  # both classes present
    # Rounding to one decimal makes ties common; the label-correlated shift makes AUC non-trivial.
    scores = np.round(rng.random(n) + 0.3 * labels, 1).astype(np.float32)
    assert auc(labels, scores) == pytest.approx(pairwise_auc(labels, scores), abs=1e-12)


def test_auc_edge_cases() -> None:
    assert math.isnan(auc(np.ones(5), np.arange(5.0)))
    assert math.isnan(auc(np.zeros(5), np.arange(5.0)))
    assert math.isnan(auc(np.empty(0), np.empty(0)))
    labels = np.array([0, 0, 1, 1, 1], dtype=np.float32)
    assert auc(labels, np.arange(5.0)) == 1.0
    assert auc(labels, -np.arange(5.0)) == 0.0
    assert auc(labels, np.full(5, 0.3)) == 0.5
    assert math.isnan(auc(labels, np.array([0.1, np.nan, 0.2, 0.3, 0.4])))
    with pytest.raises(ValueError, match="differ in length"):
        auc(labels, np.arange(4.0))


def test_logloss_matches_formula() -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, 500).astype(np.float32)
    probs = rng.random(500).astype(np.float32)
    p = probs.astype(np.float64)
    expected = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert logloss(labels, probs) == pytest.approx(expected, rel=1e-9)
    # Clipping keeps a certain miss finite: -log(eps).
    assert logloss(np.array([1.0]), np.array([0.0])) == pytest.approx(-math.log(1e-7), rel=1e-6)
    assert math.isnan(logloss(np.empty(0), np.empty(0)))


def filled_log(seed: int = 3) -> tuple[ScoreLog, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    log = ScoreLog()
    labels, probs = [], []
    for size in [5, 0, 17, 1, 40]:
        y = rng.integers(0, 2, size).astype(np.float32)
        p = rng.random(size).astype(np.float32)
        log.append(y, p)
        labels.append(y)
        probs.append(p)
    return log, np.concatenate(labels), np.concatenate(probs)


def test_score_log_windows_are_slices_of_the_whole() -> None:
    log, labels, probs = filled_log()
    assert len(log) == labels.size == 63
    assert log.auc() == auc(labels, probs)
    assert log.logloss() == logloss(labels, probs)
    for n in [0, 1, 10, 62, 63, 1000]:
        y, p = log.window(n)
        start = max(0, labels.size - n)
        np.testing.assert_array_equal(y, labels[start:])
        np.testing.assert_array_equal(p, probs[start:])
    assert log.window_auc(30) == auc(labels[-30:], probs[-30:])
    assert log.window_logloss(30) == logloss(labels[-30:], probs[-30:])
    # Appending after a read keeps the earlier rows and adds the new ones.
    log.append(np.array([1.0]), np.array([0.25]))
    y, p = log.window(2)
    np.testing.assert_array_equal(y, [labels[-1], 1.0])
    np.testing.assert_array_equal(p, [probs[-1], 0.25])
    with pytest.raises(ValueError):
        log.window(-1)


def test_score_log_copies_its_input_and_hands_out_read_only_arrays() -> None:
    log = ScoreLog()
    y = np.array([0.0, 1.0], dtype=np.float32)
    p = np.array([0.2, 0.8], dtype=np.float32)
    log.append(y, p)
    y[:] = 5.0
    labels, probs = log.window(2)
    np.testing.assert_array_equal(labels, [0.0, 1.0])
    with pytest.raises(ValueError):
        probs[0] = 1.0


def test_score_log_state_round_trip() -> None:
    log, labels, probs = filled_log()
    state = log.state_dict()
    restored = ScoreLog()
    restored.append(np.array([1.0]), np.array([0.5]))  # replaced by the load
    restored.load_state_dict(state)
    assert len(restored) == len(log)
    np.testing.assert_array_equal(restored.window(100)[0], labels)
    np.testing.assert_array_equal(restored.window(100)[1], probs)
    assert restored.auc() == log.auc()
    empty = ScoreLog()
    assert len(empty) == 0 and math.isnan(empty.auc()) and math.isnan(empty.logloss())
    other = ScoreLog()
    other.load_state_dict(empty.state_dict())
    assert len(other) == 0


def test_percentiles_exact_below_the_reservoir_size() -> None:
    rng = np.random.default_rng(11)
    values = rng.exponential(30.0, 900)
    tracker = Percentiles(size=1000, seed=1)
    for chunk in np.array_split(values, 7):
        tracker.add(chunk)
    tracker.add(np.array([np.nan, np.inf]))  # dropped
    assert tracker.count == len(tracker) == 900
    assert tracker.min == values.min() and tracker.max == values.max()
    for q in [0.0, 0.01, 0.5, 0.9, 0.99, 1.0]:
        assert tracker.quantile(q) == pytest.approx(float(np.quantile(values, q)), rel=1e-12)


def test_percentiles_approximate_for_a_large_stream() -> None:
    rng = np.random.default_rng(12)
    tracker = Percentiles(size=5000, seed=2)
    for _ in range(40):
        tracker.add(rng.uniform(0.0, 100.0, 5000))
    assert tracker.count == 200_000
    for q in [0.1, 0.5, 0.9, 0.99]:
        assert tracker.quantile(q) == pytest.approx(100.0 * q, abs=2.5)
    assert 0.0 <= tracker.min < 0.01 and 99.99 < tracker.max <= 100.0
    assert tracker.quantile(1.0) == tracker.max


def test_percentiles_sample_is_uniform_over_the_stream() -> None:
    # A sorted stream: a reservoir biased to early or late values would shift the median.
    tracker = Percentiles(size=2000, seed=5)
    stream = np.arange(100_000, dtype=np.float64)
    for chunk in np.array_split(stream, 13):
        tracker.add(chunk)
    assert tracker.quantile(0.5) == pytest.approx(50_000, rel=0.05)


def test_percentiles_deterministic_and_independent_of_chunking() -> None:
    values = np.random.default_rng(13).random(30_000)
    trackers = [Percentiles(size=1000, seed=9) for _ in range(3)]
    trackers[0].add(values)
    trackers[1].add(values)
    for chunk in np.array_split(values, 17):
        trackers[2].add(chunk)
    reference = trackers[0].state_dict()["sample"]
    for tracker in trackers[1:]:
        np.testing.assert_array_equal(tracker.state_dict()["sample"], reference)
    other_seed = Percentiles(size=1000, seed=10)
    other_seed.add(values)
    assert not np.array_equal(other_seed.state_dict()["sample"], reference)


def test_percentiles_state_round_trip_continues_identically() -> None:
    rng = np.random.default_rng(14)
    first, second = rng.random(3000), rng.random(3000)
    uninterrupted = Percentiles(size=500, seed=3)
    uninterrupted.add(first)
    resumed = Percentiles(size=500, seed=99)  # the loaded RNG state replaces this seed's
    resumed.load_state_dict(uninterrupted.state_dict())
    uninterrupted.add(second)
    resumed.add(second)
    assert resumed.state_dict()["sample"].tolist() == uninterrupted.state_dict()["sample"].tolist()
    assert (resumed.count, resumed.min, resumed.max) == (6000, uninterrupted.min, uninterrupted.max)
    with pytest.raises(ValueError, match="reservoir"):
        Percentiles(size=10).load_state_dict(uninterrupted.state_dict())


def test_percentiles_empty_and_invalid() -> None:
    tracker = Percentiles(size=10)
    assert math.isnan(tracker.quantile(0.5)) and math.isnan(tracker.min) and math.isnan(tracker.max)
    with pytest.raises(ValueError):
        tracker.quantile(1.5)
    with pytest.raises(ValueError):
        Percentiles(size=0)
