"""Injected time and ids, so expiry tests move a clock instead of sleeping and ids are
reproducible in tests. The one clock every package uses."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]
IdFactory = Callable[[], str]


def utc_now() -> datetime:
    return datetime.now(UTC)


def random_id() -> str:
    """A random, unguessable id (160 bits, URL-safe)."""
    return secrets.token_urlsafe(20)


class ManualClock:
    """A clock that only moves when told to (tests and benches)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
