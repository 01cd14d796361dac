"""Helpers shared by the reliability benches (not a bench: the leading underscore hides it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import secrets
import sys
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from sqlalchemy.engine import make_url

from infra.settings import Settings

T = TypeVar("T")


@contextlib.asynccontextmanager
async def child_process(
    module: str, *args: str, what: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """``python -m module *args`` with pipes: the child and the JSON of its ready line (its
    first line on stdout) until exit; closing its stdin then stops it (killed after 30 s).
    ``what`` names it in the error when it ends before it is ready."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 120)
        if not line:
            raise RuntimeError(f"{what} ended before it was ready")
        yield child, json.loads(line)
    finally:
        if child.stdin is not None:
            child.stdin.close()  # the child stops and exits
        try:
            await asyncio.wait_for(child.wait(), 30)
        except TimeoutError:
            child.kill()
            await child.wait()


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


class ThreadUsage:
    """CPU time and voluntary context switches of this process's thread ``name`` (Linux),
    read at ``start`` and ``stop``: figures a noisy machine shifts far less than latency.

    A voluntary switch is the thread blocking: on a socket, or waiting for the GIL after a
    system call let go of it. With agents computing on the main thread each GIL wait lasts
    up to a switch interval, so switches per request count the ack's hand-overs."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._begin: tuple[float, int] | None = None
        self.cpu_s = 0.0
        self.switches = 0

    def _read(self) -> tuple[float, int] | None:
        for thread in threading.enumerate():
            if thread.name != self._name or thread.ident is None:
                continue
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            status = Path(f"/proc/self/task/{thread.native_id}/status")
            switches = 0
            with contextlib.suppress(OSError):
                for line in status.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches = int(line.split()[1])
            return cpu, switches
        return None

    def start(self) -> None:
        self._begin = self._read()

    def stop(self) -> None:
        end = self._read()
        if self._begin is not None and end is not None:
            self.cpu_s = end[0] - self._begin[0]
            self.switches = end[1] - self._begin[1]

    def per_request(self, requests: int) -> dict[str, float]:
        n = max(1, requests)
        return {
            "ack_thread_cpu_ms_per_request": round(self.cpu_s * 1000 / n, 3),
            "ack_thread_switches_per_request": round(self.switches / n, 2),
        }
