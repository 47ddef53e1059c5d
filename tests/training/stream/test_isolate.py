"""Halving a refused block: every bad item found alone, every good one run once, in order, and far
fewer calls than one per item."""

from __future__ import annotations

import pytest

from airflow_provider_primus.training.stream.isolate import bisect_block


class Refused(ValueError):
    pass


class Recorder:
    def __init__(self, bad: set[int]) -> None:
        self.bad = bad
        self.calls = 0
        self.trained: list[int] = []
        self.alone: list[int] = []

    def run(self, items: list[int]) -> int:
        self.calls += 1
        if self.bad & set(items):
            raise Refused(f"bad among {items[0]}..{items[-1]}")
        self.trained += items
        return len(items)

    def one(self, item: int) -> int:
        self.calls += 1
        if item in self.bad:
            self.alone.append(item)
            return 0
        self.trained.append(item)
        return 1


@pytest.mark.parametrize("bad", [set(), {0}, {511}, {7, 300}, {100, 101, 102}, set(range(0, 512, 64))])
def test_every_bad_item_is_found_alone_and_the_rest_run_once_in_order(bad: set[int]) -> None:
    items = list(range(512))
    recorder = Recorder(bad)
    assert bisect_block(items, recorder.run, recorder.one, (Refused,)) == 512 - len(bad)
    assert recorder.trained == [i for i in items if i not in bad]
    assert recorder.alone == sorted(bad)
    assert recorder.calls <= 1 + 2 * max(1, len(bad)) * 9  # about 2·k·log2(n), not n


def test_other_errors_propagate_and_nothing_is_run_for_an_empty_block() -> None:
    recorder = Recorder(set())
    assert bisect_block([], recorder.run, recorder.one, (Refused,)) == 0 and recorder.calls == 0

    def broken(items: list[int]) -> int:
        raise KeyError("a bug, not a bad event")

    with pytest.raises(KeyError):
        bisect_block([1, 2], broken, recorder.one, (Refused,))
