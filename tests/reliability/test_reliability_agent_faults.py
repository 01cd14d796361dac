"""Faults around a run: an MCP server killed mid-call, the primary model down, the IdP down."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, ServerConfig, ToolPolicy
from agent_core.threads import MemoryThreadStore
from audit import AuditLog, AuditObserver, AuditQuery, EventKind, SqlAuditSink
from broker import BrokerUnavailableError, Identity
from broker.remote import RemoteBroker
from broker.types import ChatUser
from infra.storage import create_engine
from infra.tls import shared_ssl_context
from testing.agent import (
    AgentEnv,
    FailingChatModel,
    FakeBroker,
    ScriptedChatModel,
    call,
    fake_mcp_server,
    final,
    new_thread,
    tool_results,
)
from testing.identity import (
    SERVICE_SECRET,
    open_broker,
    serve_broker_service,
    start_dev_idp,
)
from tests.reliability.children import serving_child

POLICY = """
tools:
  fake_lookup: {kind: read}
  fake_slow_lookup: {kind: read}
"""
ALICE = Identity("alice", ChatUser("slack", "T1", "U1"), "alice@example.com", frozenset())
BOUND = 30.0  # far above the configured timeouts: the test fails instead of hanging


def echo_last_tool(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    return final(str(results[-1].content) if results else "no tool result")


@contextlib.asynccontextmanager
async def mcp_process() -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """The throwaway MCP server as its own process; killed (if still alive) on exit."""
    async with serving_child("tests.reliability.slow_mcp_server", bound=BOUND) as child:
        yield f"http://127.0.0.1:{child.port}/mcp", child.proc


async def until_line(proc: asyncio.subprocess.Process, prefix: bytes) -> bytes:
    assert proc.stdout is not None
    while True:
        line = await proc.stdout.readline()
        assert line, "the server exited before printing the expected line"
        if line.startswith(prefix):
            return line


def fake_agent(url: str, model: Any, broker: Any = None) -> Agent:
    return Agent(
        AgentConfig(
            servers=(ServerConfig("fake", url, url),),
            read_timeout=5.0,
            read_retries=1,
            retry_initial_delay=0.0,
        ),
        model=model,
        broker=broker or FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(POLICY),
    )


async def test_mcp_server_killed_mid_call_gives_a_degraded_answer_within_the_timeout() -> None:
    async with mcp_process() as (url, proc):
        model = ScriptedChatModel(
            steps=[call("fake_slow_lookup", item="A-1", seconds=600), echo_last_tool]
        )
        agent = fake_agent(url, model)
        thread = await new_thread(agent, ALICE)
        run = asyncio.create_task(agent.run(ALICE, thread, "look up A-1"))
        await asyncio.wait_for(until_line(proc, b"CALL slow_lookup"), BOUND)
        proc.send_signal(signal.SIGKILL)  # the server dies with the call in flight
        await proc.wait()
        result = await asyncio.wait_for(run, BOUND)

        assert isinstance(result, Answer)
        assert "cannot reach fake" in result.answer

        # The next run on the dead server is answered at once, with the server left out.
        later = fake_agent(url, ScriptedChatModel(steps=[final("without it")]))
        thread = await new_thread(later, ALICE)
        again = await asyncio.wait_for(later.run(ALICE, thread, "try again"), BOUND)
        assert isinstance(again, Answer)
        assert any("fake" in c and "unavailable" in c for c in again.caveats), again.caveats


async def test_primary_model_down_the_fallback_answers_and_the_audit_names_it(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    engine = create_engine(sqlite_url)
    try:
        log = AuditLog(SqlAuditSink(engine))
        backup = ScriptedChatModel(
            model_name="backup-model",
            steps=[call("ticketing_get_ticket", key="PAY-101"), echo_last_tool],
        )
        agent = agent_env.agent(FailingChatModel(model_name="primary-model"))
        agent = Agent(
            agent.config,
            model=FailingChatModel(model_name="primary-model"),
            fallbacks=[backup],
            broker=agent_env.harness.broker,
            threads=agent.threads,
            checkpointer=InMemorySaver(),
            policy=agent.policy,
            observer=AuditObserver(log),
        )
        alice = await agent_env.user("alice")
        thread = await new_thread(agent, alice)

        result = await asyncio.wait_for(agent.run(alice, thread, "show PAY-101"), BOUND)

        assert isinstance(result, Answer)
        assert result.model_used == "backup-model"
        assert "PAY-101" in result.answer
        [record] = await log.query(AuditQuery(kinds=(EventKind.TOOL_CALL,)))
        assert record.tool == "ticketing_get_ticket"
        assert record.model_used == "backup-model"
    finally:
        await engine.dispose()


async def test_idp_down_gives_a_clear_error_not_a_hang() -> None:
    async with fake_mcp_server() as (url, plan), contextlib.AsyncExitStack() as idp_stack:
        idp = await idp_stack.enter_async_context(start_dev_idp({"fake": url}))
        async with open_broker(idp, servers={"fake": url}) as harness:
            alice = await harness.link("alice")
            await idp_stack.aclose()  # the IdP goes down after alice linked
            agent = fake_agent(
                url,
                ScriptedChatModel(steps=[call("fake_lookup", item="A-1"), echo_last_tool]),
                broker=harness.broker,
            )
            thread = await new_thread(agent, alice)
            result = await asyncio.wait_for(agent.run(alice, thread, "look up A-1"), BOUND)
    assert isinstance(result, Answer)
    assert "fake" in result.answer
    assert "identity provider" in result.answer.lower() or "unavailable" in result.answer.lower()
    assert plan.calls == {}  # nothing reached the server without a token


async def test_broker_service_down_gives_a_clear_error_not_a_hang() -> None:
    async with (
        fake_mcp_server() as (url, plan),
        start_dev_idp({"fake": url}) as idp,
        open_broker(idp, servers={"fake": url}) as harness,
    ):
        alice = await harness.link("alice")
        async with serve_broker_service(harness) as remote:
            base_url = remote.base_url
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=5.0) as http:
            down = RemoteBroker(base_url, SERVICE_SECRET, http)
            with pytest.raises(BrokerUnavailableError):
                await down.get_token(alice, "fake")
            agent = fake_agent(
                url,
                ScriptedChatModel(steps=[call("fake_lookup", item="A-1"), echo_last_tool]),
                broker=down,
            )
            thread = await new_thread(agent, alice)
            result = await asyncio.wait_for(agent.run(alice, thread, "look up A-1"), BOUND)
    assert isinstance(result, Answer)
    assert "fake" in result.answer
    assert "unavailable" in result.answer.lower()
    assert plan.calls == {}
