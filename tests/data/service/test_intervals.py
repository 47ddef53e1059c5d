import random

from airflow_provider_primus.data.service.intervals import IntervalSet


def test_merge_missing_and_cover() -> None:
    s = IntervalSet([(0, 10), (20, 30)])
    assert s.missing(5, 25) == [(10, 20)]
    assert s.present(5, 25) == [(5, 10), (20, 25)]
    s.add(10, 20)
    assert s.ranges() == [(0, 30)] and s.covers(0, 30) and s.total() == 30
    assert s.first_gap(0) == 30 and s.first_gap(31) == 31


def test_random_against_a_set_of_rows() -> None:
    rng = random.Random(7)
    s, rows = IntervalSet(), set()
    for _ in range(500):
        a = rng.randrange(0, 1000)
        b = a + rng.randrange(0, 50)
        s.add(a, b)
        rows.update(range(a, b))
        x = rng.randrange(0, 1000)
        y = x + rng.randrange(0, 100)
        assert sum(q - p for p, q in s.missing(x, y)) == len(set(range(x, y)) - rows)
        assert {r for p, q in s.present(x, y) for r in range(p, q)} == set(range(x, y)) & rows
    assert s.total() == len(rows)
    assert all(r[1] < n[0] for r, n in zip(s.ranges(), s.ranges()[1:], strict=False))
