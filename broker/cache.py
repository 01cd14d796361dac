"""A single-flight cache: one load per key at a time, values kept until their expiry.

Invalidating a key drops its value and detaches the load in flight, so a load that started
before ``invalidate`` is never served to callers who arrive after it. The next load of that
key starts once the detached one has ended, and serves every caller that arrives until it
starts: twenty approvals of one requester, each invalidating the requester's token and
asking for a fresh one at once (a click's "rights now" check), make two loads, not twenty,
and each caller still gets a value loaded after it asked.
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


@dataclass(slots=True)
class _Flight(Generic[V]):
    task: asyncio.Task[tuple[V, datetime | None]] | None = None
    # Not queued behind a detached load: its loader may run any time, so an invalidation
    # detaches it (one queued runs its loader only after the invalidations before it).
    started: bool = True


class SingleFlightCache(Generic[K, V]):
    """``get_or_load(key, loader)``: cached value, a load in flight, or a new load."""

    def __init__(self, clock: Clock = utc_now) -> None:
        self._clock = clock
        self._values: dict[K, _Entry[V]] = {}
        # The load that serves newcomers, and one still running that an invalidation
        # detached (the next load waits for it: one load per key at a time).
        self._flights: dict[K, _Flight[V]] = {}
        self._detached: dict[K, asyncio.Task[tuple[V, datetime | None]]] = {}

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
        flight = self._flights.get(key)
        if flight is None:
            after = self._detached.get(key)
            flight = self._flights[key] = _Flight(started=after is None)
            flight.task = asyncio.create_task(self._load(key, loader, flight, after))
            flight.task.add_done_callback(_consume_exception)
        assert flight.task is not None
        # shield: a cancelled waiter must not cancel the load the others wait for.
        value, _ = await asyncio.shield(flight.task)
        return value, False

    async def _load(
        self,
        key: K,
        loader: Callable[[], Awaitable[tuple[V, datetime | None]]],
        flight: _Flight[V],
        after: asyncio.Task[tuple[V, datetime | None]] | None,
    ) -> tuple[V, datetime | None]:
        try:
            if after is not None:
                await asyncio.wait({after})  # its outcome is its own callers'
            flight.started = True
            value, fresh_until = await loader()
            keep = fresh_until is not None and fresh_until > self._clock()
            if self._flights.get(key) is flight and keep and fresh_until is not None:
                self._values[key] = _Entry(value, fresh_until)
            return value, fresh_until
        finally:
            if self._flights.get(key) is flight:
                del self._flights[key]
            if self._detached.get(key) is flight.task:
                del self._detached[key]

    def invalidate(self, key: K) -> None:
        self._values.pop(key, None)
        flight = self._flights.get(key)
        # A load not started yet will load after this call: it may still serve.
        if flight is not None and flight.started and flight.task is not None:
            del self._flights[key]
            self._detached[key] = flight.task

    def invalidate_where(self, predicate: Callable[[K], bool]) -> None:
        for key in [k for k in self._values if predicate(k)]:
            del self._values[key]
        for key in [k for k in self._flights if predicate(k)]:
            self.invalidate(key)

    def __len__(self) -> int:
        return len(self._values)


def _consume_exception(task: asyncio.Task[object]) -> None:
    # Waiters may all be gone; retrieving the exception keeps asyncio from logging it.
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()
