"""MCP connections outlive a run (``agent_core.transport``): a warm run opens no TCP
connection to the server, its sessions never open the standing GET stream, and each
session still ends at the server (DELETE)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from anyio._backends._asyncio import AsyncIOBackend

from agent_core.transport import ConnectionPools
from testing.agent import AgentEnv, FunctionChatModel, new_thread
from testing.turns import reads_then_answer


async def test_warm_runs_reuse_the_agents_connections_and_open_no_get_stream(
    agent_env: AgentEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(2)))
    # Idle connections kept long enough for a slow machine; the default is 2 s.
    agent.pools = ConnectionPools(keepalive_expiry=60)
    alice = await agent_env.user("alice")
    cold = await agent.run(alice, await new_thread(agent, alice), "show 2 tickets")
    assert cold.kind == "answer", cold
    await agent.settle()  # the cold run's session ended before counting starts
    port = urlparse(agent_env.servers.ticketing.url).port

    connects: list[int] = []
    sent: list[tuple[int | None, str]] = []
    connect_tcp = AsyncIOBackend.connect_tcp
    send = httpx.AsyncClient.send

    async def counting_connect(cls: Any, host: str, to: int, *args: Any) -> Any:
        connects.append(to)
        return await connect_tcp.__func__(cls, host, to, *args)  # type: ignore[attr-defined]

    async def recording_send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> Any:
        sent.append((request.url.port, request.method))
        return await send(self, request, **kw)

    monkeypatch.setattr(AsyncIOBackend, "connect_tcp", classmethod(counting_connect))
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
