"""The error bases: the terminal marker is found on the error or on what it was raised from."""

from __future__ import annotations

from airflow_provider_primus.errors import PrimusError, TerminalError, is_terminal, one_line
from airflow_provider_primus.resources.backend import BackendUnusableError


def test_terminal_is_found_through_the_cause() -> None:
    class Lost(TerminalError):
        pass

    assert is_terminal(Lost("gone"))
    assert not is_terminal(PrimusError("try again"))
    assert not is_terminal(OSError(28, "No space left on device"))
    try:
        try:
            raise Lost("offset 5 is gone")
        except Lost as exc:
            raise RuntimeError("ingest failed") from exc
    except RuntimeError as wrapped:
        assert is_terminal(wrapped)


def test_a_backend_that_cannot_go_on_is_terminal() -> None:
    assert is_terminal(BackendUnusableError("the YARN application ended"))


def test_one_line_names_the_type_and_keeps_to_one_line() -> None:
    assert one_line(OSError("No space\n left on device")) == "OSError: No space left on device"
    assert len(one_line(ValueError("x" * 2000), limit=100)) == 100
    assert one_line(KeyError()) == "KeyError: (no message)"
