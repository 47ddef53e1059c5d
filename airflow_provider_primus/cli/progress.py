"""Progress of the long commands (plan, gen, train, run, bench) on a person's terminal, and nowhere else.

A progress display is for someone watching: it is drawn on stderr only when both stdout and stderr
are terminals, so ``primus plan … | jq``, ``primus bench … > result.json`` and every executor's log
get exactly the output they always had. ``--json`` is the machine-readable promise: stdout carries
one JSON document and nothing is drawn; informational lines that a command writes to stderr are
kept out of a terminal then too (a log file still gets them, see :func:`chatty`).

The display is ``rich``'s (it comes with Airflow): a bar when the amount of work is known (planned
partitions, history days, a job's tasks), a spinner with the elapsed time and the latest figures
when it is not (a stream that may go on, a benchmark's stages).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any

__all__ = ["Bar", "bench_stages", "chatty", "on_terminal"]

# The logger whose INFO records are a benchmark's stages ("generating the store", "round 2/5").
BENCH_LOGGER = "airflow_provider_primus.bench"


def _tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced by something without a file, or closed
        return False


def on_terminal(json_output: bool = False, *, disabled: bool = False) -> bool:
    """Whether to draw progress: a person at a terminal asked for neither JSON nor silence."""
    return not json_output and not disabled and _tty(sys.stdout) and _tty(sys.stderr)


def chatty(json_output: bool) -> bool:
    """Whether a command's informational stderr lines (``primus train: mode …``, a job's status
    lines) are written: always, except on a terminal when ``--json`` was asked for (a log file, as
    an executor's stderr is, keeps them)."""
    return not (json_output and _tty(sys.stderr))


class Bar:
    """One progress line on stderr while the work runs; every method does nothing when disabled.

    ``total`` None: work of unknown size (given later, or never); ``counted=False``: no count at all,
    a spinner with the elapsed time (a benchmark's stages). ``detail`` is free text after the bar
    (tasks found, rows trained, the stage).
    """

    def __init__(
        self, description: str, *, enabled: bool, total: float | None = None, counted: bool = True
    ) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        count = (BarColumn(), MofNCompleteColumn()) if counted else ()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            *count,
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}"),
            console=Console(file=sys.stderr),
            refresh_per_second=8,
        )
        self._task = self._progress.add_task(description, total=total, detail="")

    def __enter__(self) -> Bar:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()  # the last state stays on the terminal, above what follows

    def update(
        self,
        *,
        completed: float | None = None,
        total: float | None = None,
        advance: float | None = None,
        detail: str | None = None,
    ) -> None:
        if self._progress is None:
            return
        fields: dict[str, Any] = {}
        if completed is not None:
            fields["completed"] = completed
        if total is not None:
            fields["total"] = total
        if advance is not None:
            fields["advance"] = advance
        if detail is not None:
            fields["detail"] = detail
        self._progress.update(self._task, **fields)


class _StageHandler(logging.Handler):
    def __init__(self, bar: Bar) -> None:
        super().__init__(logging.INFO)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        self.bar.update(detail=record.getMessage())


@contextmanager
def bench_stages(bar: Bar) -> Iterator[None]:
    """While a benchmark runs, its stage messages (INFO on the bench logger) become the bar's
    detail; with the bar disabled nothing is attached and the benchmark logs as it always did."""
    if not bar.enabled:
        yield
        return
    logger = logging.getLogger(BENCH_LOGGER)
    handler = _StageHandler(bar)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # the stages are drawn, not printed a second time by a root handler
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
