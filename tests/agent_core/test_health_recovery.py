"""Degraded mode ends at the first successful probe, and a down server is probed every ≤ 3 s
(a real HTTP server on loopback; the health module's clock is injected, so nothing sleeps)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from agent_core.errors import ToolTransientError
from agent_core.health import ServerHealth
from infra.serving import bind_socket, socket_url


@dataclass
class Toggle:
    up: bool = False
    probes: int = 0


@contextlib.asynccontextmanager
async def mcp_like_server(state: Toggle) -> AsyncIterator[str]:
    """Answers 401 (up: an MCP server without a token) or 503 (down behind its proxy)."""

    async def handle(_request: web.Request) -> web.Response:
        state.probes += 1
        return web.Response(status=401 if state.up else 503)

    app = web.Application()
    app.router.add_get("/mcp", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_socket("127.0.0.1", 0)
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"{socket_url(sock)}/mcp"
    finally:
        await runner.cleanup()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_degraded_mode_ends_at_the_first_probe_after_the_server_is_back() -> None:
    state, clock = Toggle(up=False), Clock()
    async with mcp_like_server(state) as url:
        health = ServerHealth(
            {"ticketing": url}, failure_threshold=3, open_seconds=30.0, monotonic=clock
        )
        for _ in range(3):  # three failed calls open the breaker
            await health.record("ticketing", ToolTransientError("ticketing", "503"))
        assert await health.is_open("ticketing")
        assert await health.available(["ticketing"]) == {"ticketing": False}
        first = state.probes
        assert first == 1

        # While degraded, probes are spaced (not one per run) but never more than 3 s apart.
        probe_times: list[float] = []
        for _ in range(12):
            clock.now += 0.5
            before = state.probes
            assert await health.available(["ticketing"]) == {"ticketing": False}
            if state.probes > before:
                probe_times.append(clock.now)
        gaps = [b - a for a, b in zip([1000.0, *probe_times], probe_times, strict=False)]
        assert probe_times, "a degraded server was never probed again"
        assert all(0 < g <= 3.0 for g in gaps), gaps
        assert len(probe_times) <= 12 * 0.5 / 1.0  # spaced: at most one a second here

        # The server is back: the next probe (≤ 3 s later) ends degraded mode, although the
        # breaker's own 30 s have not passed.
        state.up = True
        clock.now += 3.0
        assert await health.available(["ticketing"]) == {"ticketing": True}
        assert not await health.is_open("ticketing")
        await health.ensure_closed("ticketing")  # calls go through again

        # Up again: probed at the normal, slower cadence.
        before = state.probes
        clock.now += 3.0
        assert await health.available(["ticketing"]) == {"ticketing": True}
        assert state.probes == before


async def test_a_server_that_was_never_down_is_not_probed_more_often() -> None:
    state, clock = Toggle(up=True), Clock()
    async with mcp_like_server(state) as url:
        health = ServerHealth({"docs": url}, check_interval=10.0, monotonic=clock)
        for _ in range(9):
            assert await health.available(["docs"]) == {"docs": True}
            clock.now += 1.0
        assert state.probes == 1
        clock.now += 1.0
        await health.available(["docs"])
        assert state.probes == 2
