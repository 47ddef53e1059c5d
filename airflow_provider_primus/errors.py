"""The product's error bases: one root for every error it raises, one marker for "retrying will not help".

A caller that decides whether to try again (the master restarting an executor, a reconcile pass, an
Airflow task's retries) asks ``is_terminal(exc)`` instead of listing classes: an executor that ends on
a terminal error fails its job at once with that error's message, where any other failure spends the
role's restarts. The marker is a base class, as controller-runtime's ``TerminalError`` wraps an error:
a class says once, where it is defined, that no retry can fix what it reports.

Standard library only: every layer may import it.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PrimusError", "TerminalError", "is_terminal", "one_line", "user_frames"]

_PACKAGE = Path(__file__).resolve().parent
_USER_FRAMES = 3  # the user's innermost frames an error carries (a status line holds ~500 characters)


class PrimusError(RuntimeError):
    """Base of every error the product raises on purpose."""


class TerminalError(PrimusError):
    """Retrying will not help: the configuration, the data or the cluster must change first (an offset
    lost under ``offset_reset: fail``, an entrypoint that does not import, a schema the data does not
    have, a backend that cannot run the job)."""


def is_terminal(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says that no retry can succeed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TerminalError):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


def one_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters: what a status field, an event and
    an Airflow task log can carry of an error without its traceback."""
    text = " ".join(str(exc).split()) or "(no message)"
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def user_frames(exc: BaseException, libraries: Sequence[Path] = ()) -> str:
    """``Type: message (at module/file.py:42 in fn; …)``: the innermost frames of ``exc`` that are
    neither this product's nor in ``libraries`` (torch, pyarrow: what the user's code called into),
    so an error from a user's model or transform says where in their code it went wrong, on one line."""
    ours = (_PACKAGE, *libraries)
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not any(Path(f.filename).resolve().is_relative_to(root) for root in ours)
    ][-_USER_FRAMES:]
    text = " ".join(str(exc).split()) or "(no message)"
    where = "; ".join(
        f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames
    )
    return f"{type(exc).__name__}: {text}" + (f" (at {where})" if where else "")
