"""Argument types the subcommands share: a count is refused by argparse, naming the option, before
any work starts (a silently corrected 0 would run something the user did not ask for)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["count_of", "positive_float"]


def count_of(things: str) -> Callable[[str], int]:
    """An argparse type for a whole number of ``things``, at least 1."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number of {things} (got {value!r})") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1 (got {n})")
        return n

    return parse


def positive_float(what: str) -> Callable[[str], float]:
    """An argparse type for a quantity of ``what`` above zero (a zero delay would make a bench's
    ratios 0/0)."""

    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of {what} (got {value!r})") from None
        if not x > 0:
            raise argparse.ArgumentTypeError(f"must be above 0 (got {value})")
        return x

    return parse
