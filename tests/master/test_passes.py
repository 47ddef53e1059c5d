"""A master gives up on failing reconcile passes only when they are both many and long."""

from __future__ import annotations

from airflow_provider_primus.master.passes import FAILING_FOR_S, MAX_BACKOFF_S, MAX_PASS_ERRORS, PassFailures


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_failures_shorter_than_the_bound_does_not_fail_the_job() -> None:
    clock = Clock()
    failing = PassFailures(clock)
    for _ in range(MAX_PASS_ERRORS * 10):  # a control plane away for a minute, passes backing off
        assert not failing.add()
        clock.now += (FAILING_FOR_S - 1) / (MAX_PASS_ERRORS * 10)
    failing.clear()
    clock.now += FAILING_FOR_S
    assert not failing.add()  # counted afresh after a pass that worked


def test_failures_that_are_many_and_long_fail_the_job() -> None:
    clock = Clock()
    failing = PassFailures(clock)
    decided = []
    for _ in range(MAX_PASS_ERRORS):
        decided.append(failing.add())
        clock.now += FAILING_FOR_S / (MAX_PASS_ERRORS - 1) + 0.01
    assert decided == [False] * (MAX_PASS_ERRORS - 1) + [True]
    assert f"{MAX_PASS_ERRORS} reconcile passes in a row failed" in failing.summary()


def test_passes_back_off_while_they_fail_and_resume_the_tick_after() -> None:
    failing = PassFailures(Clock())
    assert failing.backoff(0.5) == 0.5
    waits = []
    for _ in range(8):
        failing.add()
        waits.append(failing.backoff(0.5))
    assert waits == sorted(waits) and waits[0] == 1.0 and waits[-1] == MAX_BACKOFF_S
    failing.clear()
    assert failing.backoff(0.5) == 0.5
