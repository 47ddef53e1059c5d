"""The value formats' errors: a bad settings file (terminal: no retry reads it better) and a registry
that cannot be asked (not terminal: it may come back)."""

from __future__ import annotations

from airflow_provider_primus.errors import PrimusError, TerminalError

__all__ = ["FormatFileError", "RegistryUnavailableError", "UndecodableValue"]


class FormatFileError(TerminalError, ValueError):
    """A schema or descriptor file named by a source cannot be used; ``field`` is its contract field
    (``avro.schema_file``), so ``primus validate`` can put the problem under it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


class RegistryUnavailableError(PrimusError, ConnectionError):
    """The schema registry did not answer, or answered with an error other than "no such id": the
    stream stops rather than dead-letter good records it merely cannot read right now."""


class UndecodableValue(PrimusError, ValueError):
    """One record's value does not decode; the message is the dead-letter reason."""
