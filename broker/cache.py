"""A single-flight cache: one load per key at a time, values kept until their expiry.

Invalidating a key drops its value and detaches any load in flight, so a load that started
before ``invalidate`` is never served to callers who arrive after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from infra.clock import Clock, utc_now

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    fresh_until: datetime


class SingleFlightCache(Generic[K, V]):
    """``get_or_load(key, loader)``: cached value, a load in flight, or a new load."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._values: dict[K, _Entry[V]] = {}
        self._flights: dict[K, asyncio.Task[tuple[V, datetime | None]]] = {}

    def peek(self, key: K) -> V | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        if entry.fresh_until <= self._clock():
            del self._values[key]
            return None
        return entry.value

    async def get_or_load(
        self, key: K, loader: Callable[[], Awaitable[tuple[V, datetime | None]]]
    ) -> tuple[V, bool]:
        """The value and whether it came from the cache.

        ``loader`` returns the value and until when it may be served (``None``: do not keep).
        A failed load is not cached: every waiter gets its exception, the next call retries.
        """
        cached = self.peek(key)
        if cached is not None:
            return cached, True
        task = self._flights.get(key)
        if task is None:
            task = asyncio.create_task(self._load(key, loader))
            self._flights[key] = task
            task.add_done_callback(_consume_exception)
        # shield: a cancelled waiter must not cancel the load the others wait for.
        value, _ = await asyncio.shield(task)
        return value, False

    async def _load(
        self, key: K, loader: Callable[[], Awaitable[tuple[V, datetime | None]]]
    ) -> tuple[V, datetime | None]:
        me = asyncio.current_task()
        try:
            value, fresh_until = await loader()
            keep = fresh_until is not None and fresh_until > self._clock()
            if self._flights.get(key) is me and keep and fresh_until is not None:
                self._values[key] = _Entry(value, fresh_until)
            return value, fresh_until
        finally:
            if self._flights.get(key) is me:
                del self._flights[key]

    def invalidate(self, key: K) -> None:
        self._values.pop(key, None)
        self._flights.pop(key, None)

    def invalidate_where(self, predicate: Callable[[K], bool]) -> None:
        for key in [k for k in self._values if predicate(k)]:
            del self._values[key]
        for key in [k for k in self._flights if predicate(k)]:
            del self._flights[key]

    def __len__(self) -> int:
        return len(self._values)


def _consume_exception(task: asyncio.Task[object]) -> None:
    # Waiters may all be gone; retrieving the exception keeps asyncio from logging it.
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()
