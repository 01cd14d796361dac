"""Argument types the commands share: each refusal is argparse's one line and exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def count_up_to(most: int) -> Callable[[str], int]:
    """A whole number from 0 to ``most`` (a database cannot take any integer: 10^30 was an
    OverflowError on SQLite and "integer out of range" on PostgreSQL, each a traceback)."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if not 0 <= value <= most:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not between 0 and {most:,}")
        return value

    return count


def utf8_problem(argv: Sequence[str]) -> str | None:
    """The first argument that is not text (bytes the locale could not decode reach Python as
    surrogates, which no database or log line takes), named by its option when it follows one
    (``argument --user``), else by its place."""
    for place, value in enumerate(argv):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            if value.startswith("-"):  # --option=value
                return f"argument {value.split('=')[0]}"
            if place and argv[place - 1].startswith("-"):
                return f"argument {argv[place - 1]}"
            return f"argument {place + 1}"
    return None
