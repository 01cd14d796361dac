"""A session closed right after ``initialize`` ends cleanly (``agent_core.transport``), and a
run's session is freed when it closes (``agent_core.sessions``).

``initialized`` is posted beside the session's next message; a run that closes at once sent
its ``DELETE`` while that POST was still in flight, and the server, ending the session under
it, broke the connection it was answering on (``ReadError`` at the client, "Unexpected ASGI
message" at the server), or cancelled the notification's POST under way, which drops its
connection: the next session opened a new one. The server runs on a loop of its own here, as
it does in production (another process), and takes a moment over the notification, as a busy
server does: the ``DELETE`` then arrives while the notification is being handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage
from mcp import ClientSession

import agent_core.middleware
from agent_core.errors import ToolCallError
from agent_core.threads import PlatformRef
from agent_core.transport import ConnectionPools, _SharedPool, request_only_transport
from infra.loop_thread import LoopThread
from infra.serving import bind_socket, serve_asgi
from mcp_servers.app import AuthConfig
from mcp_servers.runner import audience_for, open_server
from testing.agent import AgentEnv, FunctionChatModel, call, final, tool_results
from testing.mcp import directory_grants, run_test_issuer
from testing.turns import reads_then_answer

SESSIONS = 60
NOTIFICATION_DELAY_S = 0.02


def slow_on_notifications(app: Any) -> Any:
    """``app``, reading a notification's body a moment late (a busy server): the session
    was found open before, and is used after."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        slow = b"notifications/initialized" in b"".join(m.get("body", b"") for m in messages)
        replay = iter(messages)

        async def replayed() -> Any:
            message = next(replay, None)
            if message is None:
                return await receive()
            if slow:
                await asyncio.sleep(NOTIFICATION_DELAY_S)
            return message

        await app(scope, replayed, send)

    return wrapped


@contextlib.asynccontextmanager
async def ticketing_on_its_own_loop() -> AsyncIterator[tuple[str, str]]:
    """The ticketing server and a token issuer on another thread's loop: (url, token)."""
    ready: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
    main = asyncio.get_running_loop()
    async with LoopThread("mcp-server") as thread:
        stop = asyncio.Event()

        async def serve() -> None:
            async with run_test_issuer() as issuer:
                sock = bind_socket("127.0.0.1", 0)
                auth = AuthConfig(
                    issuer=issuer.issuer, audience=audience_for(sock), jwks_url=issuer.jwks_url
                )
                async with (
                    open_server("ticketing", auth) as server,
                    serve_asgi(slow_on_notifications(server.asgi_app()), sock) as base,
                ):
                    groups, scopes = directory_grants("alice", "ticketing")
                    token = issuer.mint(sub="alice", aud=auth.audience, scope=scopes, groups=groups)
                    main.call_soon_threadsafe(ready.set_result, (f"{base}/mcp", token))
                    await stop.wait()

        served = asyncio.run_coroutine_threadsafe(serve(), thread.loop)
        try:
            yield await asyncio.wait_for(ready, 30)
        finally:
            thread.loop.call_soon_threadsafe(stop.set)
            await asyncio.wrap_future(served)


async def test_sessions_closed_at_once_after_initialize_all_end_cleanly(
    caplog: pytest.LogCaptureFixture, pool_connects: list[int]
) -> None:
    failures: list[BaseException] = []
    connects = pool_connects
    pools = ConnectionPools(keepalive_expiry=60)
    async with (
        ticketing_on_its_own_loop() as (url, token),
        httpx.AsyncClient(  # the agent's kind of client: on a kept-alive pool
            transport=pools.for_server("ticketing", url, verify=True),
            headers={"Authorization": f"Bearer {token}"},
        ) as client,
    ):
        for _ in range(SESSIONS):
            try:
                async with (
                    request_only_transport(url, client) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await asyncio.wait_for(session.initialize(), 10)
            except BaseException as exc:  # counted, reported below
                failures.append(exc)
        await pools.aclose()
    assert not failures, f"{len(failures)}/{SESSIONS} closes failed: {failures[:3]!r}"
    # Every request found a kept-alive connection: none was dropped under a request (two at
    # most are open at once, the notification's and the next request's).
    assert 1 <= len(connects) <= 3, f"{len(connects)} connections for {SESSIONS} sessions"
    errors: list[Any] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors[:3]]


async def one_read_turns_without_the_collector(
    agent_env: AgentEnv,
    after_each: Callable[[], None],
    turns: int = 3,
    step: Callable[[list[BaseMessage]], AIMessage] | None = None,
) -> None:
    """``turns`` one-read runs (``step`` is the model's), each run with the cyclic garbage
    collector off, then ``after_each`` (its checks) while it is still off."""
    agent = agent_env.agent(FunctionChatModel(fn=step or reads_then_answer(1)))
    alice = await agent_env.user("alice")
    for i in range(turns):
        thread = await agent.threads.get_or_create(
            PlatformRef("slack", "T", "C", f"ts-{i}"), alice.subject
        )
        gc.collect()
        gc.disable()
        try:
            assert (await agent.run(alice, thread.thread_id, "show PAY-101")).kind == "answer"
            await agent.settle()
            after_each()
        finally:
            gc.enable()


async def test_a_runs_session_is_freed_when_it_closes_not_left_to_the_garbage_collector(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK cancelled its receive loop and the transport its writers on close: each
    # cancellation's traceback kept the session, its transport and HTTP objects in reference
    # cycles (~100 objects a run) for the full collections that stall the ack thread.
    opened: list[weakref.ref[ClientSession]] = []
    init = ClientSession.__init__

    def recording_init(self: ClientSession, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        opened.append(weakref.ref(self))

    def all_freed() -> None:
        assert opened, "the run opened no session"
        assert [r() for r in opened] == [None] * len(opened)
        opened.clear()

    monkeypatch.setattr(ClientSession, "__init__", recording_init)
    await one_read_turns_without_the_collector(agent_env, all_freed)


async def test_a_runs_http_responses_are_freed_as_they_close(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx's client wraps each response body in a stream that points back at the response:
    # every request of a run (initialize, initialized, the call, DELETE), its headers and
    # connection-pool objects stayed in a reference cycle, ~60 objects each, until a full
    # collection.
    responses: list[weakref.ref[httpx.Response]] = []
    handle = _SharedPool.handle_async_request

    async def recording(self: _SharedPool, request: httpx.Request) -> httpx.Response:
        response = await handle(self, request)
        responses.append(weakref.ref(response))
        return response

    def all_freed() -> None:
        assert len(responses) >= 3, "the run made no MCP requests"
        kept = [r() for r in responses if r() is not None]
        assert not kept, [(r.request.method, r.status_code) for r in kept]
        responses.clear()

    monkeypatch.setattr(_SharedPool, "handle_async_request", recording)
    await one_read_turns_without_the_collector(agent_env, all_freed)


async def test_a_failed_call_leaves_no_exception_behind_for_the_collector(
    agent_env: AgentEnv,
) -> None:
    # A failed call's exception passes some twenty layers (tenacity, LangGraph's tool node,
    # the adapters), frames among them holding it: ~700 objects a failed call stayed in a
    # reference cycle until a full collection.
    def missing_ticket(messages: list[BaseMessage]) -> AIMessage:
        if tool_results(messages):
            return final("not found", [])
        return call("ticketing_get_ticket", key="PAY-99999")

    def none_left() -> None:
        left = [o for o in gc.get_objects() if isinstance(o, ToolCallError)]
        assert not left, left[:3]

    seen: list[str] = []
    mapped = agent_core.middleware.error_message

    def recording(request: Any, text: str, **kwargs: Any) -> Any:
        seen.append(text)
        return mapped(request, text, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(agent_core.middleware, "error_message", recording)
        await one_read_turns_without_the_collector(agent_env, none_left, step=missing_ticket)
    assert len(seen) == 3, seen
    assert all("PAY-99999" in text for text in seen), seen
