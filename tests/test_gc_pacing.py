"""Full garbage collections at the ack server's quiet moments (``infra.gc_pacing``): CPython's
own are off while the block runs, a due one waits until no request has been in flight for a
while, and one is forced after ten times CPython's interval whatever the traffic."""

from __future__ import annotations

import asyncio
import gc
import threading

import aiohttp
import pytest
from aiohttp import web

from infra.ack import serve_fronts
from infra.gc_pacing import FORCE_AFTER, FULL_AFTER, NEVER, QUIET, FullCollections, Traffic
from infra.serving import bind_socket
from tests.test_ack_serving import _Hello


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _paced(traffic: Traffic, since: list[int]) -> tuple[FullCollections, list[int]]:
    collected: list[int] = []

    def collect() -> int:
        collected.append(since[0])
        since[0] = 0  # a full collection starts the count again, as CPython's does
        return 0

    pacer = FullCollections(traffic, collect=collect, count=lambda: (0, 0, since[0]))
    return pacer, collected


def test_a_due_collection_waits_for_a_quiet_moment() -> None:
    clock = _Clock()
    traffic = Traffic(clock)
    since = [FULL_AFTER - 1]
    pacer, collected = _paced(traffic, since)
    clock.now += 10 * QUIET
    assert not pacer.check()  # not due yet, however quiet
    since[0] = FULL_AFTER
    traffic.in_flight = 1
    assert not pacer.check()  # due, but an ack is in flight
    traffic.in_flight = 0
    traffic.last_done = clock.now
    clock.now += QUIET / 2
    assert not pacer.check()  # the last request ended just now: more may follow
    clock.now += QUIET
    assert pacer.check()
    assert collected == [FULL_AFTER]
    assert pacer.collections == 1


def test_a_collection_is_forced_under_constant_traffic() -> None:
    traffic = Traffic(_Clock())
    traffic.in_flight = 3
    since = [FORCE_AFTER - 1]
    pacer, collected = _paced(traffic, since)
    assert not pacer.check()
    since[0] = FORCE_AFTER
    assert pacer.check()  # memory stays bounded: cycles cannot pile up for ever
    assert collected == [FORCE_AFTER]


async def test_the_middleware_counts_requests_in_flight() -> None:
    clock = _Clock()
    traffic = Traffic(clock)
    seen: list[float] = []

    async def handler(_request: web.Request) -> web.Response:
        seen.append(traffic.quiet_for())
        assert traffic.in_flight == 1
        clock.now += 5.0
        return web.Response()

    await traffic.middleware(_request(), handler)
    assert seen == [0.0]  # in flight: never quiet
    assert traffic.in_flight == 0
    assert traffic.last_done == clock.now
    clock.now += 0.3
    assert traffic.quiet_for() == pytest.approx(0.3)


async def test_cpythons_own_full_collections_are_off_while_the_block_runs() -> None:
    before = gc.get_threshold()
    async with FullCollections(Traffic()):
        young, middle, full = gc.get_threshold()
        assert (young, middle) == before[:2]  # the young generations as before
        assert full == NEVER
    assert gc.get_threshold() == before


async def test_two_pacers_overlapping_put_the_thresholds_back_once_both_end() -> None:
    before = gc.get_threshold()
    first, second = FullCollections(Traffic()), FullCollections(Traffic())
    await first.__aenter__()
    await second.__aenter__()
    await first.__aexit__(None, None, None)
    assert gc.get_threshold()[2] == NEVER  # the second still paces them
    await second.__aexit__(None, None, None)
    assert gc.get_threshold() == before


async def test_the_ack_server_runs_the_full_collections_when_quiet() -> None:
    before = gc.get_threshold()
    try:
        async with serve_fronts(bind_socket("127.0.0.1", 0), [_Hello()]) as url:
            async with aiohttp.ClientSession() as session, session.get(f"{url}/hi") as answer:
                assert answer.status == 200
            assert await full_collection_thread() == "ack"
    finally:
        gc.unfreeze()
    assert gc.get_threshold() == before


async def full_collection_thread() -> str | None:
    """With garbage until a full collection is due, the thread that ran the next one (CPython's
    own being off, only the pacer's loop runs it); ``None`` if none ran within 5 s."""
    young, middle, full = gc.get_threshold()
    assert full == NEVER
    ran_on: list[str] = []

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            ran_on.append(threading.current_thread().name)

    gc.callbacks.append(on_collection)
    try:
        # Garbage until a full collection is due (FULL_AFTER generation-1 collections).
        for _ in range(10 * FULL_AFTER * (middle + 1)):
            _cycles(young)
            if gc.get_count()[2] >= FULL_AFTER:
                break
        assert gc.get_count()[2] >= FULL_AFTER
        for _ in range(100):
            if ran_on:
                break
            await asyncio.sleep(QUIET / 4)
    finally:
        gc.callbacks.remove(on_collection)
    return ran_on[0] if ran_on else None


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)


def _request() -> web.Request:
    from aiohttp.test_utils import make_mocked_request

    return make_mocked_request("GET", "/")
