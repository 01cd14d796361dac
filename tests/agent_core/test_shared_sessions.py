"""Approved calls (``Agent.execute``) share their requester's MCP sessions for a while
(``agent_core.shared_sessions``): one session for many calls, never one user's session for
another user's call, and each call carries the token minted for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
from agent_core.approved_calls import ApprovedCall
from agent_core.shared_sessions import SharedSessions
from agent_core.threads import MemoryThreadStore, PlatformRef
from broker import AccessToken, ExchangeFailedError, Identity
from infra.serving import bind_socket, serve_asgi, socket_url
from testing.agent import FAKE_POLICY, FakeBroker, FaultPlan, build_fake_server

ALICE, BOB = Identity("alice"), Identity("bob")


@dataclass
class MintingBroker(FakeBroker):
    """A new token value at each mint (as an IdP's exchange gives), cached until
    invalidated, as the broker does; ``refused`` users get none."""

    count: int = 0
    refused: set[str] = field(default_factory=set)
    cached: dict[tuple[str, str], AccessToken] = field(default_factory=dict)

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        if identity.subject in self.refused:
            raise ExchangeFailedError(server, "access revoked")
        key = (identity.subject, server)
        if key not in self.cached:
            token = await super().get_token(identity, server)
            self.count += 1
            self.cached[key] = AccessToken(
                f"{token.value}-{self.count}", token.audience, token.expires_at
            )
        return self.cached[key]

    async def invalidate(self, identity: Identity, server: str) -> None:
        await super().invalidate(identity, server)
        self.cached.pop((identity.subject, server), None)


@dataclass
class Seen:
    """Each MCP request the server got: its JSON-RPC method, session id and credential."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)

    def calls(self) -> list[tuple[str, str]]:
        return [(session, auth) for method, session, auth in self.requests if method == "call"]


def recording(app: Any, seen: Seen) -> Any:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        method = scope["method"]
        with contextlib.suppress(ValueError):
            payload = json.loads(body) if body else {}
            if payload.get("method") == "tools/call":
                method = "call"
        seen.requests.append(
            (
                method,
                headers.get(b"mcp-session-id", b"").decode(),
                headers.get(b"authorization", b"").decode(),
            )
        )
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()
    sock = bind_socket()
    url = f"{socket_url(sock)}/mcp"
    app = recording(build_fake_server(FaultPlan()).streamable_http_app(), seen)
    async with serve_asgi(app, sock):
        yield url, seen


def make_agent(url: str, broker: FakeBroker) -> Agent:
    return Agent(
        AgentConfig(servers=(ServerConfig("fake", url, url),), retry_initial_delay=0.0),
        model=None,  # type: ignore[arg-type]  # execute takes no model step
        broker=broker,
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
    )


async def approved(
    agent: Agent, broker: MintingBroker, identity: Identity, n: int, minted: list[str] | None = None
) -> dict[str, Any]:
    """Run approved call ``n`` for ``identity`` as the approvals do: a fresh token first
    (added to ``minted``)."""
    thread = await agent.threads.get_or_create(
        PlatformRef("t", "T", "C", identity.subject), identity.subject
    )
    await broker.invalidate(identity, "fake")
    with contextlib.suppress(ExchangeFailedError):
        token = await broker.get_token(identity, "fake")
        if minted is not None:
            minted.append(f"Bearer {token.value}")
    args = {"item": f"X-{n}"}
    call = ApprovedCall(thread.thread_id, f"a-{n}", f"call-{n}", "fake_change", args, args)
    return await agent.execute(identity, call)


async def test_a_requesters_approved_calls_share_one_session(server: tuple[str, Seen]) -> None:
    url, seen = server
    broker = MintingBroker(audiences={"fake": url})
    agent = make_agent(url, broker)
    try:
        for n in range(3):
            assert (await approved(agent, broker, ALICE, n))["data"]["status"] == "success"
        results = await asyncio.gather(*(approved(agent, broker, ALICE, n) for n in range(3, 10)))
        assert all(r["data"]["status"] == "success" for r in results)
        assert agent.stats.sessions_opened == 1  # was one per call
        assert len({session for session, _ in seen.calls()}) == 1
    finally:
        await agent.settle()
    assert [m for m, *_ in seen.requests].count("DELETE") == 1  # closed at shutdown


async def test_each_approved_call_sends_the_token_minted_for_it(server: tuple[str, Seen]) -> None:
    url, seen = server
    broker = MintingBroker(audiences={"fake": url})
    agent = make_agent(url, broker)
    minted: list[str] = []
    try:
        for n in range(4):
            await approved(agent, broker, ALICE, n, minted)
    finally:
        await agent.settle()
    assert len(set(minted)) == 4
    assert [auth for _, auth in seen.calls()] == minted
    assert agent.stats.sessions_opened == 1


async def test_a_call_carries_the_token_handed_to_it_and_asks_for_none(
    server: tuple[str, Seen],
) -> None:
    """The approvals hand each call the token its decision's check minted: the call sends
    that one, even when another decision of the same requester minted a newer one meanwhile
    (asking the broker again would send the newer, or wait for its exchange)."""
    url, seen = server
    broker = MintingBroker(audiences={"fake": url})
    agent = make_agent(url, broker)
    thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", "alice"), "alice")
    handed: list[str] = []
    try:
        for n in range(3):  # the first opens the session, the others reuse it
            await broker.invalidate(ALICE, "fake")
            token = await broker.get_token(ALICE, "fake")
            handed.append(f"Bearer {token.value}")
            await broker.invalidate(ALICE, "fake")
            await broker.get_token(ALICE, "fake")  # another decision's check, meanwhile
            args = {"item": f"X-{n}"}
            call = ApprovedCall(thread.thread_id, f"a-{n}", f"call-{n}", "fake_change", args, args)
            result = await agent.execute(ALICE, call, tokens={"fake": token})
            assert result["data"]["status"] == "success"
    finally:
        await agent.settle()
    assert [auth for _, auth in seen.calls()] == handed
    assert broker.count == 6  # the two checks' per call; the calls minted none


async def test_users_never_share_a_session(server: tuple[str, Seen]) -> None:
    url, seen = server
    broker = MintingBroker(audiences={"fake": url})
    agent = make_agent(url, broker)
    try:
        for n in range(3):
            await asyncio.gather(
                approved(agent, broker, ALICE, 2 * n), approved(agent, broker, BOB, 2 * n + 1)
            )
    finally:
        await agent.settle()
    users: dict[str, set[str]] = {}
    for session, auth in seen.calls():
        users.setdefault(session, set()).add(auth.split("-")[1])  # Bearer tok-<user>-fake-<n>
    assert sorted(sorted(u) for u in users.values()) == [["alice"], ["bob"]]


async def test_a_refused_requester_gets_no_call_on_the_open_session(
    server: tuple[str, Seen],
) -> None:
    url, seen = server
    broker = MintingBroker(audiences={"fake": url})
    agent = make_agent(url, broker)
    try:
        assert (await approved(agent, broker, ALICE, 0))["data"]["status"] == "success"
        broker.refused.add("alice")  # revoked between two approvals
        refused = await approved(agent, broker, ALICE, 1)
    finally:
        await agent.settle()
    assert refused["data"]["status"] == "error"
    assert len(seen.calls()) == 1  # nothing sent with the token minted before


class Sessions:
    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_shared_sessions_close_once_unused_for_their_idle_time() -> None:
    opened: list[Sessions] = []

    def open_sessions(_: Identity) -> Any:
        opened.append(Sessions())
        return opened[-1]

    shared = SharedSessions(open_sessions, idle_s=0.05)
    async with shared.borrow(ALICE) as first, shared.borrow(ALICE) as second:
        assert first is second
    async with shared.borrow(ALICE) as again:  # within the idle time: the same
        assert again is first
    await asyncio.sleep(0.2)
    assert opened[0].closed == 1
    async with shared.borrow(ALICE) as later, shared.borrow(BOB) as bobs:
        assert later is not first
        assert bobs is not later
    await shared.aclose()
    assert [s.closed for s in opened] == [1, 1, 1]
