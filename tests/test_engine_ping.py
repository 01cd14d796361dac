"""PostgreSQL engines ping a pooled connection only after it sat idle (``ping_when_idle``):
back-to-back transactions cost no extra round trip, and a connection that died while idle
(a database restart) is still replaced before use."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.storage import create_engine, warm_pool

pytestmark = pytest.mark.postgres


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counted_pings(engine: AsyncEngine) -> list[int]:
    dialect = engine.sync_engine.dialect
    pings: list[int] = []
    ping = dialect.do_ping

    def counting(dbapi: Any) -> bool:
        pings.append(1)
        return ping(dbapi)

    dialect.do_ping = counting  # type: ignore[method-assign]
    return pings


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


def terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_back_to_back_transactions_are_not_pinged(postgres_url: str) -> None:
    clock = Clock()
    engine = create_engine(postgres_url, pool_size=1, max_overflow=0, monotonic=clock)
    pings = counted_pings(engine)
    try:
        for _ in range(5):
            async with engine.begin() as conn:
                await conn.execute(text("SELECT 1"))
        assert pings == []
        clock.now += 2.0  # idle for longer than the default second
        async with engine.begin() as conn:
            await conn.execute(text("SELECT 1"))
        assert pings == [1]
    finally:
        await engine.dispose()


async def test_a_connection_that_died_while_idle_is_replaced_before_use(
    postgres_url: str,
) -> None:
    clock = Clock()
    engine = create_engine(postgres_url, pool_size=1, max_overflow=0, monotonic=clock)
    try:
        first = await backend_pid(engine)
        terminate(postgres_url, first)  # as a database restart would
        clock.now += 2.0
        second = await backend_pid(engine)  # no error: the ping found it dead
        assert second != first
    finally:
        await engine.dispose()


async def test_a_connection_killed_right_after_use_fails_once_then_the_pool_recovers(
    postgres_url: str,
) -> None:
    clock = Clock()
    engine = create_engine(postgres_url, pool_size=1, max_overflow=0, monotonic=clock)
    try:
        first = await backend_pid(engine)
        terminate(postgres_url, first)
        with pytest.raises(DBAPIError) as failed:
            await backend_pid(engine)
        assert failed.value.connection_invalidated
        assert await backend_pid(engine) != first
    finally:
        await engine.dispose()


async def test_an_engine_without_idle_pings_never_pings(postgres_url: str) -> None:
    """``ping_after_idle=None``: for a caller that retries a dead connection's statement
    itself (the ack inbox), however long the connection idled."""
    clock = Clock()
    engine = create_engine(
        postgres_url, pool_size=1, max_overflow=0, monotonic=clock, ping_after_idle=None
    )
    pings = counted_pings(engine)
    try:
        await backend_pid(engine)
        clock.now += 3600.0
        await backend_pid(engine)
        assert pings == []
    finally:
        await engine.dispose()


async def test_warm_pool_opens_the_pools_connections_before_the_first_burst(
    postgres_url: str,
) -> None:
    """The first burst after a start found an empty pool and opened a connection per
    concurrent transaction on its way; warmed, it opens none."""
    engine = create_engine(postgres_url, pool_size=5, max_overflow=5)
    connects: list[object] = []
    event.listen(engine.sync_engine, "connect", lambda *_: connects.append(1))
    try:
        assert await warm_pool(engine, 5) == 5
        assert len(connects) == 5
        assert engine.sync_engine.pool.checkedin() == 5  # type: ignore[attr-defined]

        async def one() -> None:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT pg_sleep(0.05)"))

        await asyncio.gather(*(one() for _ in range(5)))
        assert len(connects) == 5  # the burst opened nothing
    finally:
        await engine.dispose()


async def test_warm_pool_is_a_no_op_for_sqlite(tmp_path: Any) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        assert await warm_pool(engine, 3) == 0
    finally:
        await engine.dispose()
