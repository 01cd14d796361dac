"""Tool metrics on a fault-injecting MCP server: retries, errors by class and calls per server
move by exactly what happened."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from prometheus_client import generate_latest

from agent_core import Agent, AgentConfig, Answer, ServerConfig, ToolPolicy
from agent_core.errors import ToolTransientError
from agent_core.health import ServerHealth
from agent_core.threads import MemoryThreadStore, PlatformRef
from broker import Identity
from opsbot.observability import REGISTRY, ToolMetrics, refresh_runtime_gauges, watching
from testing.agent import (
    FAKE_POLICY,
    FakeBroker,
    FaultPlan,
    ScriptedChatModel,
    call,
    fake_mcp_server,
    final,
    tool_results,
)
from tests.ops.conftest import Samples, delta, parse_metrics, value


def echo(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    return final(str(results[-1].content) if results else "none")


@pytest.fixture
async def fake() -> AsyncIterator[tuple[str, FaultPlan]]:
    async with fake_mcp_server() as server:
        yield server


def _agent(url: str) -> Agent:
    return Agent(
        AgentConfig(
            servers=(ServerConfig("fake", url, url),), read_retries=2, retry_initial_delay=0.0
        ),
        model=ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo]),
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
        observer=ToolMetrics(),
    )


def _scrape() -> Samples:
    return parse_metrics(generate_latest(REGISTRY).decode())


async def _run(agent: Agent, text: str) -> Any:
    thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", text), "alice")
    return await agent.run(Identity("alice"), thread.thread_id, text)


async def test_retries_and_errors_per_server(fake: tuple[str, FaultPlan]) -> None:
    url, plan = fake
    plan.http_failures["lookup"] = [503, 503]  # two transient failures, then success
    before = _scrape()
    result = await _run(_agent(url), "look up X-1")
    after = _scrape()
    assert isinstance(result, Answer)
    assert plan.calls["lookup"] == 3
    assert delta(before, after, "opsbot_tool_retries_total", server="fake") == 2
    assert (
        delta(before, after, "opsbot_tool_calls_total", server="fake", kind="read", outcome="error")
        == 2
    )
    assert (
        delta(
            before, after, "opsbot_tool_calls_total", server="fake", kind="read", outcome="success"
        )
        == 1
    )
    assert (
        delta(before, after, "opsbot_tool_errors_total", server="fake", error="ToolTransientError")
        == 2
    )

    plan.http_failures["lookup"] = [503, 503, 503]  # retries exhausted: reported to the model
    before = _scrape()
    await _run(_agent(url), "look up X-1 again")
    after = _scrape()
    assert delta(before, after, "opsbot_tool_retries_total", server="fake") == 2
    assert (
        delta(before, after, "opsbot_tool_errors_total", server="fake", error="ToolTransientError")
        == 3
    )
    assert (
        delta(
            before, after, "opsbot_tool_calls_total", server="fake", kind="read", outcome="success"
        )
        == 0
    )


async def test_breaker_state_is_published_at_scrape() -> None:
    health = ServerHealth({"flaky": "http://127.0.0.1:9/mcp"}, failure_threshold=2)
    with watching(health, ["flaky"]):
        await refresh_runtime_gauges()
        assert value(_scrape(), "opsbot_circuit_breaker_open", server="flaky") == 0
        for _ in range(2):
            await health.record("flaky", ToolTransientError("flaky", "503"))
        await refresh_runtime_gauges()
        assert value(_scrape(), "opsbot_circuit_breaker_open", server="flaky") == 1
