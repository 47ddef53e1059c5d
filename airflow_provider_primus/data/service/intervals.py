"""Sets of half-open row ranges [a, b): how acknowledged progress is kept per task.

Progress is a set of ranges, not one offset, because a straggler's remainder can be split and
consumed out of order; merging keeps it as small as the number of gaps.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable


class IntervalSet:
    __slots__ = ("_r",)

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._r: list[tuple[int, int]] = []
        for a, b in ranges:
            self.add(a, b)

    def add(self, a: int, b: int) -> None:
        if b <= a:
            return
        r = self._r
        i = bisect_left(r, (a, a))
        if i > 0 and r[i - 1][1] >= a:
            i -= 1
        j = i
        while j < len(r) and r[j][0] <= b:
            a, b = min(a, r[j][0]), max(b, r[j][1])
            j += 1
        r[i:j] = [(a, b)]

    def missing(self, a: int, b: int) -> list[tuple[int, int]]:
        """The parts of [a, b) not in the set, in order."""
        out: list[tuple[int, int]] = []
        pos = a
        for x, y in self._r:
            if y <= pos:
                continue
            if x >= b:
                break
            if x > pos:
                out.append((pos, min(x, b)))
            pos = max(pos, y)
            if pos >= b:
                break
        if pos < b:
            out.append((pos, b))
        return out

    def present(self, a: int, b: int) -> list[tuple[int, int]]:
        """The parts of [a, b) in the set, in order."""
        return [(max(x, a), min(y, b)) for x, y in self._r if x < b and y > a]

    def covers(self, a: int, b: int) -> bool:
        return not self.missing(a, b)

    def first_gap(self, a: int) -> int:
        """The first row >= a not in the set."""
        for x, y in self._r:
            if x <= a < y:
                return y
        return a

    def total(self) -> int:
        return sum(b - a for a, b in self._r)

    def ranges(self) -> list[tuple[int, int]]:
        return list(self._r)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntervalSet) and other._r == self._r

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"IntervalSet({self._r})"
