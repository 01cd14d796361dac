"""Helpers shared by the reliability benches (not a bench: the leading underscore hides it)."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import secrets
import sys
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import psycopg
from sqlalchemy.engine import make_url

from infra.settings import Settings

T = TypeVar("T")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def peak_rss_mb() -> float:
    """This process's peak resident set size (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def postgres_reachable() -> bool:
    try:
        psycopg.connect(Settings().test_database_url, connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


@contextlib.contextmanager
def throwaway_postgres(prefix: str = "opsbot_bench") -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards."""
    admin_url = Settings().test_database_url
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class OtherLoop:
    """Slack's side (the fake Web API and the event sender) on its own thread and loop, so
    the measured app loop does only the app's work."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stack = contextlib.AsyncExitStack()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    async def enter(self, cm: contextlib.AbstractAsyncContextManager[T]) -> T:
        """Open ``cm`` (a server) on this loop; ``aclose`` closes it there."""
        return await self.call(self.stack.enter_async_context(cm))

    async def aclose(self) -> None:
        await self.call(self.stack.aclose())
        self.close()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
