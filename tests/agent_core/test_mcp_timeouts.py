"""A server that accepts the connection and then hangs (issue 20): the per-server timeout
fires, counts for the circuit breaker, and with the breaker open the run fails fast and the
chat says the server is not responding. Real HTTP servers on loopback, short timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, ServerConfig, ToolPolicy
from agent_core.factory import agent_config
from agent_core.threads import MemoryThreadStore, PlatformRef
from broker import Identity
from infra.serving import bind_socket, socket_url
from infra.settings import Settings
from testing.agent import (
    FAKE_POLICY,
    FakeBroker,
    ScriptedChatModel,
    call,
    fake_mcp_server,
    final,
    tool_results,
)

ALICE = Identity("alice")


def echo(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    return final(str(results[-1].content) if results else "none")


def make_agent(url: str, model: Any, *, timeout_s: float, **config: Any) -> Agent:
    config.setdefault("retry_initial_delay", 0.0)
    return Agent(
        AgentConfig(servers=(ServerConfig("fake", url, url, timeout_s=timeout_s),), **config),
        model=model,
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
    )


async def run(agent: Agent, text: str) -> tuple[Any, float]:
    thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", text), "alice")
    started = time.perf_counter()
    result = await agent.run(ALICE, thread.thread_id, text)
    return result, time.perf_counter() - started


async def test_hanging_call_times_out_trips_the_breaker_then_fails_fast() -> None:
    hang = call("fake_slow_lookup", item="X-1", seconds=3600)
    async with fake_mcp_server() as (url, plan):
        model = ScriptedChatModel(steps=[hang, echo, hang, echo, hang, echo])
        # Without the per-call timeout these calls would wait for the agent-wide 20 s.
        agent = make_agent(url, model, timeout_s=0.5, read_retries=0, breaker_threshold=2)

        first, took = await run(agent, "one")
        assert isinstance(first, Answer)
        assert "timed out" in first.answer
        assert took < 5
        second, _ = await run(agent, "two")
        assert "timed out" in second.answer
        assert plan.calls["slow_lookup"] == 2
        assert await agent.health.is_open("fake")

        third, took = await run(agent, "three")
        assert isinstance(third, Answer)
        assert took < 1  # fails fast: nothing was sent
        assert plan.calls["slow_lookup"] == 2
        assert any("fake is not responding" in c for c in third.caveats)
        # The model got its own text, not the person's.
        assert "fake_slow_lookup cannot run" in third.answer


async def test_a_server_without_its_own_timeout_has_the_agents_read_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every configured server got ``timeout_s`` 30 from the settings, so the agent's read
    and write timeouts (``OPSBOT_AGENT__READ_TIMEOUT_SECONDS``...) applied to none of them: a
    hung read held a turn 30 s per attempt, whatever the operator set."""
    hang = call("fake_slow_lookup", item="X-1", seconds=3600)
    async with fake_mcp_server() as (url, plan):
        servers = [{"name": "fake", "url": url, "audience": url}]
        monkeypatch.setenv("OPSBOT_MCP_SERVERS", json.dumps(servers))
        monkeypatch.setenv("OPSBOT_AGENT__READ_TIMEOUT_SECONDS", "0.5")
        monkeypatch.setenv("OPSBOT_AGENT__READ_RETRIES", "0")
        config = agent_config(Settings(_env_file=None))  # type: ignore[call-arg]
        assert config.servers[0].timeout_s is None
        agent = Agent(
            replace(config, retry_initial_delay=0.0),
            model=ScriptedChatModel(steps=[hang, echo]),
            broker=FakeBroker(audiences={"fake": url}),
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=ToolPolicy.from_yaml(FAKE_POLICY),
        )

        result, took = await run(agent, "slow")

        assert isinstance(result, Answer)
        assert "timed out" in result.answer
        assert took < 10  # was 30 s
        assert plan.calls["slow_lookup"] == 1


async def test_a_server_with_its_own_breaker_trips_on_its_own_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 19: the per-server settings for a server that hangs. ``breaker_threshold`` and
    ``breaker_open_seconds`` in ``OPSBOT_MCP_SERVERS`` override the agent's for that server
    only: one hung call opens it, while the same server under another name (the agent's
    threshold of 3) keeps its calls going."""
    hang = call("fake_slow_lookup", item="X-1", seconds=3600)
    hang_too = call("twin_slow_lookup", item="X-1", seconds=3600)
    async with fake_mcp_server() as (url, plan):
        servers = [
            {"name": "fake", "url": url, "audience": url, "timeout_s": 0.5},
            {"name": "twin", "url": url, "audience": url, "timeout_s": 0.5},
        ]
        servers[0] |= {"breaker_threshold": 1, "breaker_open_seconds": 120}
        monkeypatch.setenv("OPSBOT_MCP_SERVERS", json.dumps(servers))
        monkeypatch.setenv("OPSBOT_AGENT__READ_RETRIES", "0")
        config = agent_config(Settings(_env_file=None))  # type: ignore[call-arg]
        assert (config.servers[0].breaker_threshold, config.servers[1].breaker_threshold) == (
            1,
            None,
        )
        agent = Agent(
            replace(config, retry_initial_delay=0.0),
            # "one" hangs on fake, "two" on twin.
            model=ScriptedChatModel(
                steps=[lambda m: hang if m[-1].content == "one" else hang_too, echo]
            ),
            broker=FakeBroker(audiences={"fake": url, "twin": url}),
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=ToolPolicy.from_yaml(FAKE_POLICY + "  twin_slow_lookup: {kind: read}\n"),
        )

        await run(agent, "one")
        await run(agent, "two")

        assert plan.calls["slow_lookup"] == 2  # one each
        assert await agent.health.is_open("fake")  # its own threshold: one timeout
        assert not await agent.health.is_open("twin")  # the agent's: three
        assert (await agent.health._breaker("fake")).context.ttl == 120


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """Accepts TCP connections and reads forever; never answers a byte."""
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(Exception):
            while await reader.read(65536):
                pass

    sock = bind_socket()
    server = await asyncio.start_server(swallow, sock=sock)
    try:
        yield f"{socket_url(sock)}/mcp"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_a_server_that_never_answers_is_left_out_in_time() -> None:
    async with silent_server() as url:
        model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
        agent = make_agent(url, model, timeout_s=0.3, breaker_threshold=1)
        agent.health._probe_timeout = 0.3  # the probe: one GET per interval

        result, took = await run(agent, "look up X-1")

        assert isinstance(result, Answer)
        assert took < 5
        assert any("fake is not responding" in c for c in result.caveats)
        assert await agent.health.is_open("fake")


async def test_session_open_on_a_hanging_server_times_out() -> None:
    from agent_core.errors import ToolTimeoutError
    from agent_core.sessions import RunSessions, SessionStats
    from agent_core.tools import DiscoveryCache

    async with silent_server() as url:
        agent = make_agent(url, ScriptedChatModel(steps=[]), timeout_s=0.3, breaker_threshold=1)
        sessions = RunSessions(
            agent._servers,
            FakeBroker(audiences={"fake": url}),
            ALICE,
            health=agent.health,
            cache=DiscoveryCache(),
            stats=SessionStats(),
        )
        started = time.perf_counter()
        try:
            await sessions.discover("fake")
            raise AssertionError("discovery on a silent server must fail")
        except ToolTimeoutError:
            pass
        finally:
            await sessions.aclose()
        assert time.perf_counter() - started < 3
        assert await agent.health.is_open("fake")  # the timeout counted for the breaker
