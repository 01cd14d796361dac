"""The HTTP under opsbot's MCP sessions: a request-only streamable HTTP transport, and TCP
connection pools that outlive a run.

A run opens its own MCP session per server (``agent_core.sessions``); what it does not need
to open again is the TCP connection under it. ``ConnectionPools`` keeps one keep-alive pool
per server for the whole agent: each run's ``httpx.AsyncClient`` carries that run's own
headers (its credential) and hooks, and borrows a connection for a request at a time. An
HTTP/1.1 connection holds no credential and no MCP session (both travel in each request's
headers), so borrowing one shares nothing between users.

``request_only_transport`` is the SDK's ``streamable_http_client`` without the standing GET
stream that the SDK opens after ``initialize``. That stream only carries what a server sends
outside any request (list-changed and log notifications), which a run does not read; its
responses, and anything a server sends during a call, come on the POST's own stream. The GET
is optional in the MCP spec, and skipping it saves a request and a connection per session.

It also sends ``notifications/initialized`` without holding the session's next message
behind its answer. The SDK posts a notification and waits for the server's ``202`` before it
takes the next message, so every session's first call waited one more round trip. The
lifecycle in the MCP spec asks the client to send ``initialized`` after the ``initialize``
response and not to send requests (but pings) *before that response*; it asks nothing of the
notification's acknowledgement, which carries no answer. So the notification's POST is
started first and the next request goes out beside it (the MCP Python server, like the spec,
takes requests once it answered ``initialize``). A refused notification still ends the
session: its POST fails in the transport's task group. A session closed at once waits (briefly)
for that POST to end before its ``DELETE``: a server that ends the session under the
notification's request breaks the connection it answers on, and the close then failed.

Every request gets an answer at once. When a request's POST ends without its JSON-RPC
response (a body that is not JSON or not JSON-RPC, another content type, an event stream
that ends early, a response to another id), the SDK logs an error and the request waited for
the call's timeout, then for each retry's. Here the request is answered then, with an error
of type ``UnreadableReply`` whose message says what was wrong; an error the server itself sent
becomes a ``ServerError``, and the SDK's answer to a 404 a ``SessionEnded``. Callers tell them
from the SDK's own errors by those types (``agent_core.mcp_failures.reply_failure``). A reply
larger than ``MAX_REPLY_BYTES`` is not read on: it is unreadable too (the SDK reads a whole
reply into memory, then parses it on the event loop: 6 MB of JSON held the loop for 3 s here).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from agent_core.netio import AsyncioBackend
from agent_core.proxies import DIRECT, Proxies
from infra.http_responses import release_body

# Below the usual 5 s server keep-alive (uvicorn's default): a connection is dropped by us
# before the server closes it under a request.
KEEPALIVE_EXPIRY_S = 2.0
# The SDK stops reading a POST's event stream at the JSON-RPC response; the server ends the
# stream right after it. Reading that end (briefly, and little) keeps the connection reusable.
DRAIN_S = 0.5
DRAIN_BYTES = 64 * 1024
# The most of one reply read; a tool result for a model is far smaller (agent_core.binding).
MAX_REPLY_BYTES = 4 * 1024 * 1024
# The most content blocks of one tool result kept: each becomes a pydantic model, then a
# LangChain block, on the event loop (130,000 tiny ones held it 1.4 s); real results have few.
MAX_CONTENT_BLOCKS = 1000

_BACKEND = AsyncioBackend()

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class ServerError(ErrorData):
    """A JSON-RPC error the server sent in answer to a request (not one the SDK made up)."""


class UnreadableReply(ErrorData):
    """The answer given to a request whose reply could not be read; ``message`` says why."""


class SessionEnded(ErrorData):
    """The answer to a request the server refused with 404: it no longer knows the session."""


class ReplyTooLargeError(httpx.ReadError):
    """A reply went past ``MAX_REPLY_BYTES``; it is not read further."""


class _Answering:
    """The read stream as one request's POST writes to it: notes whether the request was
    answered, marks the server's errors and keeps unparsable parts (the SDK's exceptions)."""

    def __init__(
        self,
        inner: MemoryObjectSendStream[SessionMessage | Exception],
        request: JSONRPCRequest,
    ) -> None:
        self._inner = inner
        self._id = str(request.id)
        self._method = request.method
        self.answered = False
        self.problem = "it held no answer to the request"

    async def send(self, item: SessionMessage | Exception) -> None:
        if isinstance(item, Exception):
            if not isinstance(item, ReplyTooLargeError):  # that one said so (``_Drained``)
                self.problem = f"unreadable: {type(item).__name__}"
            return
        root = item.message.root
        if isinstance(root, JSONRPCResponse | JSONRPCError) and str(root.id) == self._id:
            self.answered = True
            if isinstance(root, JSONRPCError) and type(root.error) is ErrorData:
                root.error = ServerError.model_validate(root.error, from_attributes=True)
            if isinstance(root, JSONRPCResponse) and self._method == "tools/call":
                _cut_content(root.result)
        await self._inner.send(item)


def _cut_content(result: dict[str, Any]) -> None:
    """Keep the first ``MAX_CONTENT_BLOCKS`` of a tool result's content, and say so."""
    content = result.get("content")
    if isinstance(content, list) and len(content) > MAX_CONTENT_BLOCKS:
        cut = len(content) - MAX_CONTENT_BLOCKS
        note = f"[{cut:,} more content blocks of this result were cut; ask for less]"
        result["content"] = [*content[:MAX_CONTENT_BLOCKS], {"type": "text", "text": note}]


# The request whose reply this task reads: a body past the limit says so to it (the SDK
# swallows a failed event stream's error; it reads the stream in this same task).
_ANSWERING: contextvars.ContextVar[_Answering | None] = contextvars.ContextVar(
    "opsbot_mcp_answering", default=None
)


class _AnsweringTransport(StreamableHTTPTransport):
    """The SDK's transport, where a request whose POST ended unanswered gets its answer."""

    async def _handle_post_request(self, ctx: RequestContext) -> None:
        root = ctx.session_message.message.root
        if not isinstance(root, JSONRPCRequest):
            await super()._handle_post_request(ctx)
            return
        answering = _Answering(ctx.read_stream_writer, root)
        token = _ANSWERING.set(answering)
        try:
            await super()._handle_post_request(
                dataclasses.replace(ctx, read_stream_writer=answering)  # type: ignore[arg-type]
            )
        finally:
            _ANSWERING.reset(token)
        if not answering.answered:
            error = UnreadableReply(code=INTERNAL_ERROR, message=answering.problem)
            reply = JSONRPCError(jsonrpc="2.0", id=root.id, error=error)
            await ctx.read_stream_writer.send(SessionMessage(JSONRPCMessage(reply)))

    async def _send_session_terminated_error(
        self, read_stream_writer: Any, request_id: RequestId
    ) -> None:
        error = SessionEnded(code=32600, message="Session terminated")  # as the SDK's
        reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        await read_stream_writer.send(SessionMessage(JSONRPCMessage(reply)))


class _Drained(httpx.AsyncByteStream):
    """A response body that, closed before its end, reads the rest first when it comes at
    once: a connection is reusable only after its response ended.

    Closed, it also takes itself off its response (``infra.http_responses``): four requests a
    one-read turn, each ~60 objects that would otherwise wait for a full collection.
    """

    def __init__(self, inner: httpx.AsyncByteStream, limit: int, response: httpx.Response) -> None:
        self._inner = inner
        self._limit = limit
        self._ended = False
        self._response = weakref.ref(response)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > self._limit:
                too_large = ReplyTooLargeError(f"larger than {self._limit / 2**20:g} MiB")
                answering = _ANSWERING.get()
                if answering is not None:
                    answering.problem = str(too_large)
                raise too_large
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        try:
            if not self._ended:
                read = 0
                with anyio.move_on_after(DRAIN_S):
                    async for chunk in self._inner:
                        read += len(chunk)
                        if read > DRAIN_BYTES:
                            break
        finally:
            await self._inner.aclose()
            release_body(self._response())


class _SharedPool(httpx.AsyncHTTPTransport):
    """A connection pool that a client's close leaves open (``ConnectionPools`` owns it)."""

    def __init__(self, *, max_reply_bytes: int, **options: Any) -> None:
        super().__init__(**options)
        self._max_reply_bytes = max_reply_bytes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # httpx gives an async stream
        response.stream = _Drained(response.stream, self._max_reply_bytes, response)
        return response

    async def __aenter__(self) -> _SharedPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def close_pool(self) -> None:
        await super().aclose()


class ConnectionPools:
    """One keep-alive connection pool per server, for every run of one agent.

    Connections belong to the event loop that opened them, so a pool is replaced when it is
    asked for from another loop.
    """

    def __init__(
        self,
        keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
        proxies: Proxies = DIRECT,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self._keepalive_expiry = keepalive_expiry
        self._proxies = proxies
        self._max_reply_bytes = max_reply_bytes
        self._pools: dict[str, tuple[asyncio.AbstractEventLoop, _SharedPool]] = {}

    def for_server(self, server: str, url: str, verify: object) -> httpx.AsyncBaseTransport:
        """The pool for ``server`` (at ``url``): direct, or through the proxy settings give
        for that URL (``agent_core.proxies``)."""
        loop = asyncio.get_running_loop()
        held = self._pools.get(server)
        if held is None or held[0] is not loop:
            pool = _SharedPool(
                max_reply_bytes=self._max_reply_bytes,
                verify=verify,  # an ssl.SSLContext
                limits=httpx.Limits(keepalive_expiry=self._keepalive_expiry),
                proxy=self._proxies.for_url(url),
            )
            # The pool's connections on asyncio directly, not through anyio (agent_core.netio);
            # through a proxy too: its CONNECT tunnel's TLS is the backend's start_tls.
            pool._pool._network_backend = _BACKEND
            self._pools[server] = held = (loop, pool)
        return held[1]

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        loop = asyncio.get_running_loop()
        for owner, pool in pools:
            if owner is loop:
                await pool.close_pool()


@contextlib.asynccontextmanager
async def request_only_transport(
    url: str, client: httpx.AsyncClient
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Streamable HTTP on ``client`` without the standing GET stream (see the module)."""
    read_writer, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    to_sdk, sdk_reader = anyio.create_memory_object_stream[SessionMessage](0)
    transport = _AnsweringTransport(url)
    async with anyio.create_task_group() as tg:
        initialized = _InitializedPost(tg)
        try:
            tg.start_soon(
                _initialized_aside,
                transport,
                client,
                write_reader,
                to_sdk,
                read_writer,
                initialized,
            )
            tg.start_soon(
                transport.post_writer, client, sdk_reader, read_writer, to_sdk, _no_get, tg
            )
            try:
                yield read, write
            finally:
                # The DELETE goes after initialized's POST ended (see the module).
                await initialized.ended(DRAIN_S)
                if transport.session_id:  # the server can drop the session at once
                    await transport.terminate_session(client)
                tg.cancel_scope.cancel()
        finally:
            await read_writer.aclose()
            await write.aclose()


class _InitializedPost:
    """The ``initialized`` notification's POST, run beside the session's next messages."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._done: anyio.Event | None = None

    def post(self, send: Callable[[], Awaitable[None]]) -> None:
        done = self._done = anyio.Event()

        async def run() -> None:
            try:
                await send()
            finally:
                done.set()

        self._tg.start_soon(run)

    async def ended(self, within: float) -> None:
        """Wait up to ``within`` seconds for the POST to end (none if none was started)."""
        if self._done is not None:
            with anyio.move_on_after(within):
                await self._done.wait()


async def _initialized_aside(
    transport: StreamableHTTPTransport,
    client: httpx.AsyncClient,
    messages: MemoryObjectReceiveStream[SessionMessage],
    to_sdk: MemoryObjectSendStream[SessionMessage],
    read_writer: MemoryObjectSendStream[SessionMessage | Exception],
    initialized: _InitializedPost,
) -> None:
    """Pass the session's messages on to the SDK's writer, but post ``initialized`` in a
    task of its own, so the next message does not wait for its ``202`` (see the module)."""
    async with messages, to_sdk:
        async for message in messages:
            if not transport._is_initialized_notification(message.message):
                await to_sdk.send(message)
                continue
            ctx = RequestContext(
                client=client,
                session_id=transport.session_id,
                session_message=message,
                metadata=None,
                read_stream_writer=read_writer,
            )
            initialized.post(functools.partial(transport._handle_post_request, ctx))


def _no_get() -> None:
    """In place of the SDK's ``start_get_stream``: no standing GET (see the module)."""
