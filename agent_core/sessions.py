"""One MCP session per server per run, opened with that run's credential for that server.

This is the one place opsbot opens an MCP ``ClientSession``. A session is opened lazily, on
the run's first call to that server, with the credential the server's auth mode gives
(``agent_core.credentials``), and closed once the run has returned its result
(``Agent.settle`` waits for those closes at shutdown). It is never shared with another
run or user — except that one requester's approved calls (``Agent.execute``) share that
requester's sessions for a few seconds (``agent_core.shared_sessions``), each putting its
own fresh credential on them first (``recredential``); the credential lives only in this
session's HTTP client headers, never in graph state. The cached tool definitions are
turned into LangChain tools bound to the session with ``langchain_mcp_adapters``'
``convert_mcp_tool_to_langchain_tool``; the adapters' interceptors carry audit
(``AuditInterceptor``) and this module's transport guard (breaker, per-call timeout,
failure mapping).

Each session lives in its own task: the MCP client's anyio task groups must be entered and
left in one task, while LangGraph calls tools from many.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import anyio
import httpx
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.interceptors import (
    MCPToolCallRequest,
    MCPToolCallResult,
    ToolCallInterceptor,
)
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
from mcp import ClientSession, McpError
from mcp.types import Implementation, InitializeResult
from mcp.types import Tool as McpTool
from pydantic import ValidationError

from agent_core.binding import ActingAs, AuditInterceptor, MCPHandler, RunContext
from agent_core.credentials import Credentials, OAuthTokenSource, ServerConfig, SessionStats
from agent_core.discovery import definitions, list_all
from agent_core.errors import (
    ConnectRequiredError,
    ServerUnavailableError,
    SessionEndedError,
    ToolCallError,
    ToolProtocolError,
    ToolTimeoutError,
)
from agent_core.health import ServerHealth
from agent_core.mcp_failures import SERVER_TEXT_CHARS, classify_failure, reply_failure
from agent_core.tools import (
    DiscoveryCache,
    ServerTools,
    ToolDefinition,
)
from agent_core.transport import (
    ConnectionPools,
    SessionEnded,
    request_only_transport,
)
from agent_core.validation import MalformedResultError, ValidatingSession
from broker import AccessToken, Broker, Identity
from infra.faults import crash_point
from infra.tls import shared_ssl_context

__all__ = ["RunSessions", "ServerConfig", "SessionStats"]

CLIENT_INFO = Implementation(name="opsbot", version="0.1.0")
T = TypeVar("T")
# Seconds a closing session waits for its transport's tasks to end on their own; past it they
# are cancelled, as the SDK always did.
QUIET_END_S = 1.0
log = logging.getLogger(__name__)


class _Held:
    """A session living in its own task until ``stop`` is set, and the tools bound to it."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.ready: asyncio.Future[tuple[ClientSession, InitializeResult]] = (
            asyncio.get_running_loop().create_future()
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.http_errors: list[int] = []
        self.failure: Exception | None = None
        self.tools: dict[str, BaseTool] = {}
        self.client: httpx.AsyncClient | None = None
        self.calls = 0  # in flight on this session
        self.retired = False  # replaced: stopped once its last call in flight returns

    @property
    def dead(self) -> bool:
        return self.task is None or self.task.done()

    @property
    def session(self) -> ClientSession:
        return self.ready.result()[0]


class _RunSession(ValidatingSession):
    """A run's ``ClientSession`` that ends without cancelling its tasks.

    The SDK's session cancels its receive loop on exit, and the transport its writers: each
    cancellation leaves an exception whose traceback holds the loop's frame, and so the
    session, the transport and its HTTP objects in reference cycles. Hundreds of objects a
    run then waited for the garbage collector, whose full collections stall the ack thread
    (``infra.gc_pacing``). Closing the session's outgoing stream first lets the transport's
    tasks end (``agent_core.transport``), which closes the incoming stream, which ends the
    receive loop: nothing is left to cancel, and the objects are freed at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._received_all = anyio.Event()

    async def _receive_loop(self) -> None:
        try:
            await super()._receive_loop()
        finally:
            self._received_all.set()

    async def end_quietly(self) -> None:
        """Close the outgoing stream and wait (briefly) for the receive loop to end."""
        await self._write_stream.aclose()
        with anyio.move_on_after(QUIET_END_S):
            await self._received_all.wait()


class RunSessions:
    """The MCP sessions of one run, for one identity (``binding.RunTools``)."""

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
        interceptors: Sequence[ToolCallInterceptor] | None = None,
        oauth_token: OAuthTokenSource | None = None,
        pools: ConnectionPools | None = None,
    ) -> None:
        self._servers = servers
        # The agent's pools outlive this run; without them, this run's own (closed with it).
        self._own_pools = pools is None
        self._pools = pools if pools is not None else ConnectionPools()
        self._cache = cache
        self.identity = identity
        self._credentials = Credentials(broker, identity, oauth_token)
        self._health = health
        self._stats = stats
        self._http_timeout = http_timeout
        self._interceptors: list[ToolCallInterceptor] = list(
            interceptors if interceptors is not None else [AuditInterceptor()]
        )
        self._held: dict[str, _Held] = {}
        # A decision's fresh token for a server whose session is not open yet: the session
        # that opens next sends it (``recredential``), not one fetched again.
        self._given: dict[str, AccessToken] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Retired sessions (``recredential``) until they stop, and their stopping tasks.
        self._retired: set[_Held] = set()
        self._stopping: set[asyncio.Task[None]] = set()
        self.versions: dict[str, str] = {}
        # ``oauth`` servers this user has not connected, with the URL that connects each:
        # the run's reply asks them to connect (the URL itself is never shown to the model).
        self.connect_needed: dict[str, str] = {}

    def acting_as(self, server: str) -> ActingAs:
        config = self._servers.get(server)
        return config.acting_as if config is not None else "user"

    async def session(self, server: str) -> ClientSession:
        return (await self._live(server)).session

    async def _live(self, server: str) -> _Held:
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            held = self._held.get(server)
            if held is None or held.dead:
                held = await self._open(server)
                self._held[server] = held
            return held

    async def tool(self, server: str, name: str) -> BaseTool:
        """The LangChain tool for ``name`` on ``server``, bound to this run's session."""
        held = await self._live(server)
        bound = held.tools.get(name)
        if bound is None:
            definition = self._definition(server, name)
            bound = convert_mcp_tool_to_langchain_tool(
                held.session,
                definition.as_mcp_tool(),
                tool_interceptors=[*self._interceptors, self._reopen_once, self._guard(held)],
                server_name=server,
                tool_name_prefix=True,
            )
            held.tools[name] = bound
        return bound

    async def recredential(self, server: str, token: AccessToken | None = None) -> None:
        """Send the identity's current credential for ``server`` on its open session from
        now on (a session kept for several calls, ``agent_core.shared_sessions``). When none
        can be had, the session is retired: the next call opens one, which fails (or not)
        as any first call would. ``token``: the one just minted for this call's decision,
        sent as it is (asking the broker again could wait for, or carry, another decision's
        token); with no session open, the one that opens next sends it."""
        held = self._held.get(server)
        config = self._servers.get(server)
        given = token if config is not None and config.takes_exchanged_token else None
        if held is None or held.dead or held.client is None:
            if given is not None:
                self._given[server] = given
            return
        try:
            if given is not None:
                headers = self._credentials.bearer(held.config, given)
            else:
                headers = await self._credentials.headers(held.config)
        except ToolCallError:
            self._retire(server, held)
            return
        held.client.headers.update(headers)

    def _retire(self, server: str, held: _Held) -> None:
        """Take ``held`` out of use; it stops once no call is in flight on it."""
        if self._held.get(server) is held:
            del self._held[server]
        held.retired = True
        self._retired.add(held)
        if held.calls == 0:
            self._stop_soon(held)

    def _stop_soon(self, held: _Held) -> None:
        task = asyncio.get_running_loop().create_task(_stop(held), name="mcp:retire")
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        task.add_done_callback(lambda _: self._retired.discard(held))

    async def _reopen_once(
        self, request: MCPToolCallRequest, handler: MCPHandler
    ) -> MCPToolCallResult:
        """A call refused for a session the server no longer knows (a 404: it took nothing)
        goes once more, on a new session, as MCP asks of a client; a write too."""
        try:
            return await handler(request)
        except SessionEndedError:
            return await self.call_again(request)

    async def call_again(self, request: MCPToolCallRequest) -> MCPToolCallResult:
        held = await self._live(request.server_name)

        async def send(r: MCPToolCallRequest) -> MCPToolCallResult:
            return await held.session.call_tool(r.name, r.args)

        return await self._guard(held)(request, send)

    def _definition(self, server: str, name: str) -> ToolDefinition:
        entry = self._cache.last(server)
        for d in entry.tools if entry is not None else ():
            if d.name == name:
                return d
        raise ServerUnavailableError(server, f"{server} no longer offers {name}")

    def _timeout(self, config: ServerConfig, request: MCPToolCallRequest) -> float:
        if config.timeout_s is not None:
            return config.timeout_s
        ctx = getattr(request.runtime, "context", None)
        if isinstance(ctx, RunContext):
            name = f"{request.server_name}_{request.name}"
            return ctx.write_timeout if ctx.policy.classify(name).is_write else ctx.read_timeout
        return self._http_timeout

    def _guard(self, held: _Held) -> ToolCallInterceptor:
        """Innermost interceptor: breaker, per-call timeout, transport failures mapped."""
        server = held.config.name

        async def guard(request: MCPToolCallRequest, handler: MCPHandler) -> MCPToolCallResult:
            await self._health.ensure_closed(server)
            self._stats.tool_calls += 1
            timeout = self._timeout(held.config, request)
            held.calls += 1
            try:
                result: MCPToolCallResult = await _call_or_die(held, handler(request), timeout)
            except McpError as exc:
                stated = reply_failure(server, exc.error)
                if stated is not None:
                    if isinstance(exc.error, SessionEnded):  # the next call opens another
                        self._retire(server, held)
                    failure: ToolCallError = stated
                elif exc.error.code == httpx.codes.REQUEST_TIMEOUT:
                    failure = ToolTimeoutError(
                        server, f"{server} did not answer {request.name} within {timeout:g}s"
                    )
                else:
                    # The transport died under the call: let the session task finish, then
                    # classify by the HTTP statuses it saw.
                    if held.task is not None:
                        with contextlib.suppress(BaseException):
                            await asyncio.wait_for(asyncio.shield(held.task), timeout=2)
                    failure = classify_failure(server, exc, held.http_errors)
                if isinstance(failure, ToolProtocolError):
                    log.warning("%s (answering %s)", failure, request.name)
                await self._health.record(server, failure)
                raise failure from None
            except TimeoutError:
                failure = ToolTimeoutError(
                    server, f"{server} did not answer {request.name} within {timeout:g}s"
                )
                await self._health.record(server, failure)
                raise failure from None
            except (
                httpx.HTTPError,
                OSError,
                ExceptionGroup,
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
            ) as exc:
                failure = classify_failure(server, exc, held.http_errors)
                await self._health.record(server, failure)
                raise failure from None
            except (ValidationError, MalformedResultError) as exc:
                # A result that is not a CallToolResult, or off the tool's output schema.
                failure = ToolProtocolError(
                    server, f"{server} sent a malformed result for {request.name}"
                )
                detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else exc
                log.warning("%s (%s)", failure, str(detail)[:SERVER_TEXT_CHARS])
                raise failure from None
            finally:
                held.calls -= 1
                if held.retired and held.calls == 0:
                    self._stop_soon(held)
            # Test only: the server answered, the run never sees it (a crash mid-call).
            crash_point("tool_call")
            await self._health.record(server, None)
            return result

        return guard

    async def _open(self, server: str) -> _Held:
        config = self._servers.get(server)
        if config is None:
            raise ServerUnavailableError(server, f"no MCP server named {server!r} is configured")
        await self._health.ensure_closed(server)  # no credential is fetched for a dead server
        given = self._given.pop(server, None)
        try:
            if given is not None:
                headers = self._credentials.bearer(config, given)
            else:
                headers = await self._credentials.headers(config)
        except ConnectRequiredError as exc:
            self.connect_needed.setdefault(server, exc.authorize_url)
            raise
        held = _Held(config)
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

        timeout = config.timeout_s or self._http_timeout
        client = httpx.AsyncClient(
            headers=headers,
            # The per-call timeout is the guard's; the read timeout only bounds the idle
            # server-to-client stream.
            timeout=httpx.Timeout(timeout, read=max(timeout * 10, 60.0)),
            event_hooks={"request": [on_request], "response": [on_response]},
            # Connections (never credentials: those are this client's headers) are reused
            # across runs: a run's session costs no TCP connect (agent_core.transport).
            transport=self._pools.for_server(server, config.url, shared_ssl_context()),
            # Proxies come from settings, through the pool (agent_core.proxies).
            trust_env=False,
        )
        held.client = client
        held.task = asyncio.create_task(self._hold(config, client, held), name=f"mcp:{server}")
        try:
            # A server that accepts the connection and then hangs fails here, in time.
            _, init = await asyncio.wait_for(asyncio.shield(held.ready), timeout)
        except BaseException as exc:
            held.stop.set()
            if held.task is not None and not held.task.done():
                held.task.cancel()
            failure = (
                ToolTimeoutError(server, f"{server} did not open a session within {timeout:g}s")
                if isinstance(exc, TimeoutError)
                else classify_failure(server, exc, held.http_errors)
            )
            if isinstance(failure, ToolProtocolError):
                log.warning("%s", failure)
            await self._health.record(server, failure)
            raise failure from None
        self._stats.sessions_opened += 1
        version = f"{init.serverInfo.name}/{init.serverInfo.version}"
        self.versions[server] = version
        self._cache.observe_version(server, version)
        cached = self._cache.last(server)
        if cached is not None:
            self._prime(held.session, cached)
        return held

    @staticmethod
    async def _hold(config: ServerConfig, client: httpx.AsyncClient, held: _Held) -> None:
        try:
            async with (
                client,
                request_only_transport(config.url, client) as (read, write),
                # Output schemas checked with validators compiled once (agent_core.validation).
                _RunSession(read, write, client_info=CLIENT_INFO) as session,
            ):
                try:
                    init = await session.initialize()
                except (RuntimeError, ValidationError) as exc:
                    # A protocol version the SDK does not speak, or a result that is not an
                    # InitializeResult: no session, and no use trying again at once.
                    why = str(exc) if isinstance(exc, RuntimeError) else "a malformed result"
                    raise ToolProtocolError(
                        config.name,
                        f"{config.name} cannot open an MCP session ({why[:SERVER_TEXT_CHARS]})",
                    ) from None
                held.ready.set_result((session, init))
                await held.stop.wait()
                await session.end_quietly()
        except BaseException as exc:  # the failure is reported to whoever waits on it
            held.failure = exc if isinstance(exc, Exception) else None
            if not held.ready.done():
                held.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError())
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def discover(self, server: str) -> ServerTools:
        """The server's tools: from the cache, or (cold) from ``tools/list``."""
        cached = self._cache.get(server)
        if cached is not None:
            return cached
        await self._health.ensure_closed(server)
        held = await self._live(server)
        version = self.versions[server]
        cached = self._cache.get(server)
        if cached is not None:  # another run discovered it meanwhile
            return cached
        timeout = held.config.timeout_s or self._http_timeout
        try:
            listed: list[McpTool] = await _call_or_die(
                held, list_all(held.session, server), timeout
            )
        except TimeoutError:
            failure: ToolCallError = ToolTimeoutError(server, f"{server} did not list its tools")
            await self._health.record(server, failure)
            raise failure from None
        except (McpError, httpx.HTTPError, OSError, ExceptionGroup) as exc:
            failure = classify_failure(server, exc, held.http_errors)
            await self._health.record(server, failure)
            raise failure from None
        found = definitions(server, listed)
        entry = ServerTools(server, version, found.tools, found.left_out)
        self._cache.put(entry)
        self._prime(held.session, entry)
        return entry

    @staticmethod
    def _prime(session: ClientSession, entry: ServerTools) -> None:
        # ClientSession.call_tool lists tools to learn output schemas it has not seen; give
        # it the cached ones so a warm run makes no tools/list call at all.
        # The cached ones also replace what the session's own tools/list recorded (a cold
        # run's): discovery may have dropped a schema that cannot check anything.
        schemas = session._tool_output_schemas  # no public setter in mcp 1.x
        for d in entry.tools:
            schemas[d.name] = dict(d.output_schema) if d.output_schema else None

    async def refresh(self, server: str) -> None:
        """After a 401: drop the cached credential and the session; the next call gets fresh."""
        config = self._servers.get(server)
        if config is not None:
            await self._credentials.invalidate(config)
        await self.reset(server)

    async def reset(self, server: str) -> None:
        """Close the server's session: the next call reopens it with a fresh credential."""
        held = self._held.pop(server, None)
        if held is not None:
            await _stop(held)

    async def aclose(self) -> None:
        held, self._held = [*self._held.values(), *self._retired], {}
        self._retired.clear()
        await asyncio.gather(*(_stop(h) for h in held), *self._stopping, return_exceptions=True)
        if self._own_pools:
            await self._pools.aclose()


async def _call_or_die(held: _Held, work: Any, timeout: float) -> T:  # noqa: ASYNC109
    """Await ``work`` for at most ``timeout`` seconds, or until the session dies under it.

    When the transport dies (a 401 or 5xx on this POST), the session task ends and cannot
    tell the pending request; watching the session task too turns that into an error now.
    """
    call: asyncio.Future[T] = asyncio.ensure_future(work)
    watched: set[asyncio.Future[Any]] = {call}
    if held.task is not None:
        watched.add(held.task)
    try:
        await asyncio.wait(watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        call.cancel()
        raise
    if call.done():
        return call.result()
    call.cancel()
    with contextlib.suppress(BaseException):
        await call
    if held.task is not None and held.task.done():
        raise held.failure or ConnectionError("the MCP session ended")
    raise TimeoutError


async def _stop(held: _Held) -> None:
    held.stop.set()
    if held.task is not None:
        try:
            await asyncio.wait_for(held.task, timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            held.task.cancel()
        except Exception:  # noqa: S110 — a dead session has nothing left to close
            pass
    # The tools, the HTTP client and the finished task all point back at the session: let
    # go of them, so that its objects are freed now rather than left as cycles for the
    # garbage collector, whose full collections stall the ack thread (infra.gc_pacing).
    # A task still running (cancelled above) stays referenced until it ends.
    held.tools.clear()
    held.client = None
    if held.task is not None and held.task.done():
        held.task = None
