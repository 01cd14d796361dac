"""One MCP session per server per run, opened with that run's user-scoped token.

A session is opened lazily, on the run's first call to that server, with a token the broker
minted for the requester and the server's audience, and closed when the run ends. It is never
shared with another run or user. The token lives only in this object's HTTP client headers —
never in graph state.

Each session lives in its own task: the MCP client's anyio task groups must be entered and
left in one task, while LangGraph calls tools from many.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from mcp import ClientSession, McpError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Implementation, InitializeResult

from agent_core.errors import (
    CredentialError,
    CredentialUnavailableError,
    ServerUnavailableError,
    ToolAuthError,
    ToolCallError,
    ToolTimeoutError,
    ToolTransientError,
)
from agent_core.health import ServerHealth, shared_ssl_context
from agent_core.tools import DiscoveryCache, ServerTools, ToolDefinition
from broker import Broker, BrokerError, BrokerUnavailableError, Identity

CLIENT_INFO = Implementation(name="opsbot", version="0.1.0")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where an MCP server lives (from settings)."""

    name: str
    url: str
    audience: str


@dataclass(slots=True)
class SessionStats:
    """Counters shared by all runs of one agent (bench and tests read them)."""

    list_tools_calls: int = 0
    sessions_opened: int = 0
    tool_calls: int = 0


class _Held:
    """A session living in its own task until ``stop`` is set."""

    def __init__(self) -> None:
        self.ready: asyncio.Future[tuple[ClientSession, InitializeResult]] = (
            asyncio.get_running_loop().create_future()
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.http_errors: list[int] = []
        self.failure: Exception | None = None

    @property
    def dead(self) -> bool:
        return self.task is None or self.task.done()


def _root_causes(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_root_causes(inner))
        return out
    return [exc]


def classify_failure(server: str, exc: BaseException, statuses: list[int]) -> ToolCallError:
    """Map a transport failure (and the HTTP statuses seen) to a ``ToolCallError``."""
    codes = list(statuses)
    for cause in _root_causes(exc):
        if isinstance(cause, ToolCallError):
            return cause
        if isinstance(cause, httpx.HTTPStatusError):
            codes.append(cause.response.status_code)
        if isinstance(cause, httpx.TimeoutException):
            return ToolTimeoutError(server, f"{server} did not answer in time")
        if isinstance(cause, httpx.TransportError | OSError):
            return ToolTransientError(server, f"cannot reach {server}: {type(cause).__name__}")
    for status in codes:
        if status in (401, 403):
            return ToolAuthError(server, status)
    for status in codes:
        if status == 429 or status >= 500:
            return ToolTransientError(server, f"{server} answered HTTP {status}")
    return ToolTransientError(server, f"the connection to {server} failed")


class RunSessions:
    """The MCP sessions of one run, for one identity."""

    def __init__(
        self,
        servers: Mapping[str, ServerConfig],
        broker: Broker,
        identity: Identity,
        *,
        health: ServerHealth,
        cache: DiscoveryCache,
        stats: SessionStats,
        http_timeout: float = 30.0,
    ) -> None:
        self._servers = servers
        self._cache = cache
        self._broker = broker
        self.identity = identity
        self._health = health
        self._stats = stats
        self._http_timeout = http_timeout
        self._held: dict[str, _Held] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.versions: dict[str, str] = {}

    async def session(self, server: str) -> ClientSession:
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            held = self._held.get(server)
            if held is None or held.dead:
                held = await self._open(server)
                self._held[server] = held
            return (await held.ready)[0]

    async def _open(self, server: str) -> _Held:
        config = self._servers.get(server)
        if config is None:
            raise ServerUnavailableError(server, f"no MCP server named {server!r} is configured")
        try:
            token = await self._broker.get_token(self.identity, server)
        except BrokerUnavailableError as exc:
            raise CredentialUnavailableError(server, str(exc)) from exc
        except BrokerError as exc:
            raise CredentialError(server, str(exc)) from exc
        held = _Held()
        stats = self._stats

        async def on_request(request: httpx.Request) -> None:
            # Counted at the wire, so nothing can list tools behind the counter's back.
            if request.method == "POST" and b'"tools/list"' in request.content:
                with contextlib.suppress(ValueError):
                    if json.loads(request.content).get("method") == "tools/list":
                        stats.list_tools_calls += 1

        async def on_response(response: httpx.Response) -> None:
            if response.status_code >= 400:
                held.http_errors.append(response.status_code)

        client = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token.value}"},
            timeout=httpx.Timeout(self._http_timeout, read=self._http_timeout * 10),
            event_hooks={"request": [on_request], "response": [on_response]},
            verify=shared_ssl_context(),
        )
        held.task = asyncio.create_task(self._hold(config, client, held), name=f"mcp:{server}")
        try:
            _, init = await held.ready
        except BaseException as exc:
            held.stop.set()
            failure = classify_failure(server, exc, held.http_errors)
            await self._health.record(server, failure)
            raise failure from None
        self._stats.sessions_opened += 1
        version = f"{init.serverInfo.name}/{init.serverInfo.version}"
        self.versions[server] = version
        self._cache.observe_version(server, version)
        cached = self._cache.get(server)
        if cached is not None:
            self._prime(held.ready.result()[0], cached)
        return held

    async def _hold(self, config: ServerConfig, client: httpx.AsyncClient, held: _Held) -> None:
        try:
            async with (
                client,
                streamable_http_client(config.url, http_client=client) as (read, write, _),
                ClientSession(read, write, client_info=CLIENT_INFO) as session,
            ):
                init = await session.initialize()
                held.ready.set_result((session, init))
                await held.stop.wait()
        except BaseException as exc:  # the failure is reported to whoever waits on it
            held.failure = exc if isinstance(exc, Exception) else None
            if not held.ready.done():
                held.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError())
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def call_tool(
        self,
        server: str,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> CallToolResult:
        """Call ``tool`` on ``server``; raises a ``ToolCallError`` for transport failures."""
        await self._health.ensure_closed(server)
        session = await self.session(server)
        held = self._held[server]
        self._stats.tool_calls += 1
        try:
            result = await self._call_or_die(held, session, tool, args, timeout)
        except McpError as exc:
            if exc.error.code == httpx.codes.REQUEST_TIMEOUT:
                failure: ToolCallError = ToolTimeoutError(
                    server, f"{server} did not answer {tool} within {timeout:g}s"
                )
            else:
                # The transport died under the call: let the session task finish, then
                # classify by the HTTP statuses it saw.
                if held.task is not None:
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.shield(held.task), timeout=2)
                failure = classify_failure(server, exc, held.http_errors)
            await self._health.record(server, failure)
            raise failure from None
        except (httpx.HTTPError, OSError, ExceptionGroup) as exc:
            failure = classify_failure(server, exc, held.http_errors)
            await self._health.record(server, failure)
            raise failure from None
        await self._health.record(server, None)
        return result

    @staticmethod
    async def _call_or_die(
        held: _Held,
        session: ClientSession,
        tool: str,
        args: dict[str, Any],
        timeout: float,  # noqa: ASYNC109
    ) -> CallToolResult:
        # When the transport dies (a 401 or 5xx on this POST), the session task is cancelled
        # and cannot tell the pending request; watch the session task too.
        call = asyncio.ensure_future(
            session.call_tool(tool, args, read_timeout_seconds=timedelta(seconds=timeout))
        )
        watched: set[asyncio.Future[Any]] = {call}
        if held.task is not None:
            watched.add(held.task)
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            call.cancel()
            raise
        if call.done():
            return call.result()
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        raise held.failure or ConnectionError("the MCP session ended")

    async def discover(self, server: str) -> ServerTools:
        """The server's tools: from the cache, or (cold) from ``tools/list``."""
        cached = self._cache.get(server)
        if cached is not None:
            return cached
        await self._health.ensure_closed(server)
        session = await self.session(server)
        version = self.versions[server]
        cached = self._cache.get(server)
        if cached is not None:  # another run discovered it meanwhile
            return cached
        tools: list[ToolDefinition] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor) if cursor else await session.list_tools()
            for t in page.tools:
                annotations = t.annotations.model_dump(exclude_none=True) if t.annotations else {}
                tools.append(
                    ToolDefinition(
                        server=server,
                        name=t.name,
                        description=t.description or "",
                        input_schema=t.inputSchema,
                        output_schema=t.outputSchema,
                        annotations=annotations,
                    )
                )
            cursor = page.nextCursor
            if not cursor:
                break
        entry = ServerTools(server=server, version=version, tools=tuple(tools))
        self._cache.put(entry)
        return entry

    @staticmethod
    def _prime(session: ClientSession, entry: ServerTools) -> None:
        # ClientSession.call_tool lists tools to learn output schemas it has not seen; give
        # it the cached ones so a warm run makes no tools/list call at all.
        schemas = session._tool_output_schemas  # no public setter in mcp 1.x
        for d in entry.tools:
            schemas.setdefault(d.name, dict(d.output_schema) if d.output_schema else None)

    async def refresh(self, server: str) -> None:
        """After a 401: drop the broker's token and the session; the next call gets fresh ones."""
        try:
            await self._broker.invalidate(self.identity, server)
        except BrokerError as exc:
            raise CredentialError(server, str(exc)) from exc
        await self.reset(server)

    async def reset(self, server: str) -> None:
        """Close the server's session: the next call reopens it with a fresh token."""
        held = self._held.pop(server, None)
        if held is not None:
            await self._stop(held)

    async def aclose(self) -> None:
        held, self._held = list(self._held.values()), {}
        await asyncio.gather(*(self._stop(h) for h in held), return_exceptions=True)

    @staticmethod
    async def _stop(held: _Held) -> None:
        held.stop.set()
        if held.task is not None:
            try:
                await asyncio.wait_for(held.task, timeout=5)
            except (TimeoutError, asyncio.CancelledError):
                held.task.cancel()
            except Exception:  # noqa: S110 — a dead session has nothing left to close
                pass
