"""MCP connections outlive a run (``agent_core.transport``): a warm run opens no TCP
connection to the server, its sessions never open the standing GET stream, and each
session still ends at the server (DELETE)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from mcp import ClientSession

from agent_core.transport import ConnectionPools, request_only_transport
from testing.agent import AgentEnv, FunctionChatModel, new_thread
from testing.turns import reads_then_answer


async def test_warm_runs_reuse_the_agents_connections_and_open_no_get_stream(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch, pool_connects: list[int]
) -> None:
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(2)))
    # Idle connections kept long enough for a slow machine; the default is 2 s.
    agent.pools = ConnectionPools(keepalive_expiry=60)
    connects = pool_connects
    alice = await agent_env.user("alice")
    cold = await agent.run(alice, await new_thread(agent, alice), "show 2 tickets")
    assert cold.kind == "answer", cold
    await agent.settle()  # the cold run's session ended before counting starts
    port = urlparse(agent_env.servers.ticketing.url).port
    assert port in connects, connects  # the cold run connected: the count sees connects
    connects.clear()

    sent: list[tuple[int | None, str]] = []
    send = httpx.AsyncClient.send

    async def recording_send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> Any:
        sent.append((request.url.port, request.method))
        return await send(self, request, **kw)

    monkeypatch.setattr(httpx.AsyncClient, "send", recording_send)
    for i in range(2):
        result = await agent.run(alice, await new_thread(agent, alice), f"show 2 tickets ({i})")
        assert result.kind == "answer", result
    await agent.settle()  # sessions end after their run answered: wait for both

    assert port not in connects, connects
    methods = [method for to, method in sent if to == port]
    assert methods.count("POST") >= 2 * 4  # initialize, initialized, two calls per run
    assert "GET" not in methods
    assert methods.count("DELETE") == 2  # every run's session is still ended at the server


async def test_the_first_request_does_not_wait_for_the_initialized_notifications_answer() -> None:
    """``initialized`` is posted and the next request goes out beside it: a server that
    answers the notification only once it has the request still serves the session (the
    SDK's writer held the request until the notification's 202: a deadlock here)."""
    got_ping = asyncio.Event()
    seen: list[str] = []

    async def server(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            return httpx.Response(200)
        body = json.loads(request.content)
        seen.append(body["method"])
        if body["method"] == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {},
                "serverInfo": {"name": "slow-ack", "version": "1"},
            }
            return httpx.Response(
                200,
                json={"jsonrpc": "2.0", "id": body["id"], "result": result},
                headers={"mcp-session-id": "s-1"},
            )
        if body["method"] == "notifications/initialized":
            await asyncio.wait_for(got_ping.wait(), 5)
            return httpx.Response(202)
        got_ping.set()
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": {}})

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(server)) as client,
        request_only_transport("http://mcp.test/mcp", client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await asyncio.wait_for(session.initialize(), 2)
        await asyncio.wait_for(session.send_ping(), 2)
    assert seen[:2] == ["initialize", "notifications/initialized"]
    assert "ping" in seen
