"""Finding the events of a block that cannot be trained, by halving the block, not event by event.

A block the transforms refuse as a whole (a python transform raising on one poisoned event, a value
the schema cannot use) has to be split to find the culprits. One event at a time costs a transform
call per event of the block, so a single bad event in a block of thousands would cost thousands of
calls of the user's function; halving costs about ``2·k·log2(n/k)`` calls for ``k`` bad events among
``n``, and the good halves are trained in one call each, in offset order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["bisect_block"]

Item = TypeVar("Item")


def bisect_block(
    items: Sequence[Item],
    run: Callable[[Sequence[Item]], int],
    one: Callable[[Item], int],
    refused: tuple[type[BaseException], ...],
) -> int:
    """``run`` on ``items``, and where it raises one of ``refused``, on each half, down to ``one``
    for a single item (which dead-letters it if it fails alone). Halves are run in order, so what
    ``run`` appends stays in the items' order. Returns the sum of what the calls return."""
    if not items:
        return 0
    if len(items) == 1:
        return one(items[0])
    try:
        return run(items)
    except refused:
        middle = len(items) // 2
        return bisect_block(items[:middle], run, one, refused) + bisect_block(
            items[middle:], run, one, refused
        )
