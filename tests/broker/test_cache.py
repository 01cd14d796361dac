"""SingleFlightCache: one load per key, expiry by the injected clock, invalidation semantics."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from broker.cache import SingleFlightCache
from infra.clock import ManualClock


class Loader:
    def __init__(self, clock: ManualClock, ttl: float = 60) -> None:
        self.clock = clock
        self.ttl = ttl
        self.calls = 0
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self) -> tuple[str, datetime | None]:
        self.calls += 1
        n = self.calls
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return f"value-{n}", self.clock() + timedelta(seconds=self.ttl)


async def test_concurrent_gets_share_one_load_and_then_hit() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    waiters = [asyncio.create_task(cache.get_or_load("k", load)) for _ in range(50)]
    await asyncio.sleep(0)
    load.release.set()
    results = await asyncio.gather(*waiters)
    assert load.calls == 1
    assert results == [("value-1", False)] * 50
    assert await cache.get_or_load("k", load) == ("value-1", True)


async def test_value_expires_by_the_clock() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock, ttl=10)
    load.release.set()
    await cache.get_or_load("k", load)
    clock.advance(9.999)
    assert (await cache.get_or_load("k", load))[1] is True
    clock.advance(0.001)
    assert await cache.get_or_load("k", load) == ("value-2", False)


async def test_failure_is_not_cached_and_reaches_every_waiter() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    load.fail = RuntimeError("boom")
    waiters = [asyncio.create_task(cache.get_or_load("k", load)) for _ in range(5)]
    await asyncio.sleep(0)
    load.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    load.fail = None
    assert await cache.get_or_load("k", load) == ("value-2", False)


async def test_invalidate_during_a_load_is_not_undone_by_it() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    early = asyncio.create_task(cache.get_or_load("k", load))
    await asyncio.sleep(0)
    cache.invalidate("k")
    late = asyncio.create_task(cache.get_or_load("k", load))  # must not join the old flight
    await asyncio.sleep(0)
    load.release.set()
    assert (await early)[0] == "value-1"
    assert (await late)[0] == "value-2"
    assert load.calls == 2
    assert cache.peek("k") == "value-2"  # the old flight did not overwrite the newer value


async def test_a_cancelled_waiter_does_not_cancel_the_shared_load() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    first = asyncio.create_task(cache.get_or_load("k", load))
    second = asyncio.create_task(cache.get_or_load("k", load))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    load.release.set()
    assert await second == ("value-1", False)
    assert load.calls == 1


async def test_values_that_are_already_stale_are_not_kept() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)

    async def short() -> tuple[str, datetime | None]:
        return "v", clock() - timedelta(seconds=1)

    await cache.get_or_load("k", short)
    assert cache.peek("k") is None
    assert len(cache) == 0


async def test_fresh_gets_at_once_share_the_load_queued_after_the_detached_one() -> None:
    """Each caller invalidates, then asks (an approval's "fresh token now"): the first load is
    detached by the second caller, and every later caller shares the one load queued behind
    it — which starts after all of them asked, so each still gets a value loaded after."""
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    asked: list[int] = []

    async def fresh(i: int) -> str:
        cache.invalidate("k")
        asked.append(load.calls)  # loads started before this caller asked
        value, _ = await cache.get_or_load("k", load)
        return value

    waiters = []
    for i in range(20):
        waiters.append(asyncio.create_task(fresh(i)))
        await asyncio.sleep(0)
    assert load.calls == 1  # the queued load waits for the detached one
    load.release.set()
    values = await asyncio.gather(*waiters)
    assert load.calls == 2  # was one per caller
    assert values == ["value-1"] + ["value-2"] * 19
    # every caller got a load that started after it asked
    assert all(int(v.split("-")[1]) > n for v, n in zip(values, asked, strict=True))
    assert cache.peek("k") == "value-2"


async def test_a_queued_load_starts_after_the_detached_one_failed() -> None:
    clock = ManualClock()
    cache: SingleFlightCache[str, str] = SingleFlightCache(clock)
    load = Loader(clock)
    load.fail = RuntimeError("boom")

    async def once_failing() -> tuple[str, datetime | None]:
        try:
            return await load()
        finally:
            load.fail = None  # only the first load fails

    first = asyncio.create_task(cache.get_or_load("k", once_failing))
    await asyncio.sleep(0)
    cache.invalidate("k")
    second = asyncio.create_task(cache.get_or_load("k", once_failing))
    await asyncio.sleep(0)
    load.release.set()
    with pytest.raises(RuntimeError):
        await first
    assert await second == ("value-2", False)
