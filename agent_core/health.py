"""Per-server health checks and circuit breakers (``purgatory``) for degraded mode.

A server whose breaker is open, or whose health probe fails, is left out of a run: its tools
are not bound, the system prompt says it is unavailable and the answer carries a caveat.
Only transport failures count against a server (connection errors, 5xx, 429, timeouts);
a refused token or a tool error means the server is up.

Degraded mode ends at the first successful probe: while a server is down (its breaker open
or its last probe failed) it is probed again at most ``degraded_interval`` (2 s) after the
previous probe, and a probe that gets an answer closes its breaker. A server that is up is
probed every ``check_interval``.

Example::

    health = ServerHealth({"ticketing": "http://127.0.0.1:8101/mcp"})
    up = await health.available(["ticketing"])      # {"ticketing": True}
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

import httpx
from purgatory import AsyncCircuitBreakerFactory
from purgatory.domain.model import HalfOpenedState, OpenedState
from purgatory.service._async.circuitbreaker import AsyncCircuitBreaker

from agent_core.errors import (
    ServerUnavailableError,
    ToolCallError,
    ToolTimeoutError,
    ToolTransientError,
)
from agent_core.proxies import DIRECT, Proxies
from infra.tls import shared_ssl_context

Breaker = tuple[int | None, float | None]
"""A server's own breaker: failures before it opens, seconds it stays open (None: default)."""


class ServerHealth:
    """Breakers and cached probe results, shared by every run of one agent."""

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        failure_threshold: int = 3,
        open_seconds: float = 30.0,
        check_interval: float = 10.0,
        degraded_interval: float = 2.0,
        probe_timeout: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        proxies: Proxies = DIRECT,
        breakers: Mapping[str, Breaker] | None = None,
    ) -> None:
        self._urls = dict(urls)
        # Servers whose breaker is not the default one: (threshold, open seconds), either
        # None for the default.
        self._own = dict(breakers or {})
        self._proxies = proxies
        self._breakers = AsyncCircuitBreakerFactory(
            default_threshold=failure_threshold, default_ttl=open_seconds
        )
        self._interval = check_interval
        self._degraded_interval = min(degraded_interval, check_interval)
        self._probe_timeout = probe_timeout
        self._now = monotonic
        self._checked: dict[str, tuple[float, bool]] = {}
        # Servers a probe found unreachable: only for these does a good probe prove recovery.
        self._unreachable: set[str] = set()
        self._lock = asyncio.Lock()

    async def _breaker(self, server: str) -> AsyncCircuitBreaker:
        threshold, ttl = self._own.get(server, (None, None))
        return await self._breakers.get_breaker(server, threshold=threshold, ttl=ttl)

    async def is_open(self, server: str) -> bool:
        breaker = await self._breaker(server)
        ctx = breaker.context
        opened_at = ctx.opened_at
        return (
            ctx.state == "opened" and opened_at is not None and time.time() <= opened_at + ctx.ttl
        )

    async def ensure_closed(self, server: str) -> None:
        """Fail fast with ``ServerUnavailableError`` while the server's breaker is open."""
        if await self.is_open(server):
            raise ServerUnavailableError(server, f"{server} is currently unavailable")

    async def record(self, server: str, failure: ToolCallError | None) -> None:
        """Feed one call's outcome to the server's breaker."""
        counts = isinstance(failure, ToolTransientError | ToolTimeoutError)
        breaker = await self._breaker(server)
        try:
            async with breaker:
                if counts and failure is not None:
                    raise failure
        except (ToolTransientError, ToolTimeoutError, OpenedState):
            pass
        if counts:
            self._checked.pop(server, None)

    async def probe(self, server: str) -> bool:
        """One unauthenticated request: any answer below 500 means the server is up (and
        closes its breaker: degraded mode ends here)."""
        url = self._urls.get(server)
        if url is None:
            return False
        try:
            async with httpx.AsyncClient(
                timeout=self._probe_timeout,
                verify=shared_ssl_context(),
                # The proxy the sessions use, from settings (agent_core.proxies).
                trust_env=False,
                proxy=self._proxies.for_url(url),
            ) as client:
                response = await client.get(url)
            ok = response.status_code < 500
        except httpx.HTTPError:
            ok = False
        if ok:
            await self._close(server)
        else:
            self._unreachable.add(server)
            await self.record(server, ToolTransientError(server, f"{server} health check failed"))
        return ok

    async def _close(self, server: str) -> None:
        breaker = await self._breaker(server)
        if breaker.context.state == "closed":
            # A server can answer a GET and still hang every call: a good probe only ends
            # degraded mode, it does not wipe the failures that calls have counted.
            return
        if server not in self._unreachable:
            # Opened by failing calls while the server kept answering probes (it may hang
            # every call): a probe proves nothing here, the breaker's own time-out decides.
            return
        # Open (or half-open) after probes found it down, and now it answers: close it now
        # rather than after the breaker's time-out (degraded mode ends at the first good
        # probe). Half-open lets one request through; its success closes it.
        self._unreachable.discard(server)
        breaker.context.set_state(HalfOpenedState())
        async with breaker:
            pass

    async def available(self, servers: Iterable[str]) -> dict[str, bool]:
        """Which servers to use for a run. A server that is up is probed at most once per
        ``check_interval``; one that is down (breaker open, or its last probe failed) is
        probed again once ``degraded_interval`` has passed since its last probe."""
        names = list(servers)
        result: dict[str, bool] = {}
        stale: list[str] = []
        now = self._now()
        for name in names:
            seen = self._checked.get(name)
            down = await self.is_open(name) or (seen is not None and not seen[1])
            interval = self._degraded_interval if down else self._interval
            if seen is not None and now - seen[0] < interval:
                result[name] = seen[1] and not down
            else:
                stale.append(name)
        if stale:
            async with self._lock:
                probed = await asyncio.gather(*(self.probe(n) for n in stale))
            for name, ok in zip(stale, probed, strict=True):
                self._checked[name] = (self._now(), ok)
                # A good probe does not reopen a server whose breaker is still open.
                result[name] = ok and not await self.is_open(name)
        return {n: result[n] for n in names}
