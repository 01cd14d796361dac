"""Injected time and ids, so expiry tests never sleep and ids are reproducible in tests."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
IdFactory = Callable[[], str]


def utc_now() -> datetime:
    return datetime.now(UTC)


def random_id() -> str:
    """A random, unguessable id (160 bits, URL-safe)."""
    return secrets.token_urlsafe(20)
