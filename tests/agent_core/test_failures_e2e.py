"""Failure handling end to end: 401 refresh, revoked access, a down server, call limits,
unclassified tools, and validation errors from the server."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from agent_core import Answer, Interrupt, ServerConfig, ToolPolicy
from broker import AccessToken, Broker, Identity
from infra.serving import bind_socket, socket_url
from testing.agent import (
    AgentEnv,
    FunctionChatModel,
    ScriptedChatModel,
    call,
    final,
    new_thread,
    tool_results,
)
from tests.agent_core.test_people_text import assert_only_peoples_words


def echo_last_tool(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    return final(str(results[-1].content) if results else "no tool result")


@dataclass
class StaleTokenBroker:
    """Wraps the real broker; hands out one tampered (rejected) token per armed server."""

    inner: Broker
    armed: set[str] = field(default_factory=set)
    gets: list[str] = field(default_factory=list)
    invalidated: list[str] = field(default_factory=list)

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        self.gets.append(server)
        token = await self.inner.get_token(identity, server)
        if server in self.armed:
            self.armed.discard(server)
            head, _, _sig = token.value.rpartition(".")
            return replace(token, value=f"{head}.{'A' * 43}")  # signature no longer verifies
        return token

    async def invalidate(self, identity: Identity, server: str) -> None:
        self.invalidated.append(server)
        await self.inner.invalidate(identity, server)


async def test_401_refreshes_once_and_succeeds(agent_env: AgentEnv) -> None:
    broker = StaleTokenBroker(agent_env.harness.broker)
    model = ScriptedChatModel(steps=[call("ticketing_get_ticket", key="PAY-101"), echo_last_tool])
    agent = agent_env.agent(model, broker=broker)
    alice = await agent_env.user("alice")
    # Warm run: discovery cached, so the 401 below happens on the tool call itself.
    await agent.run(alice, await new_thread(agent, alice), "warm up")
    broker.armed.add("ticketing")
    broker.gets.clear()

    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")

    assert isinstance(result, Answer)
    assert "Refunds stuck in PENDING" in result.answer
    assert broker.invalidated == ["ticketing"]
    assert broker.gets == ["ticketing", "ticketing"]


async def test_401_twice_names_the_missing_access(agent_env: AgentEnv) -> None:
    broker = StaleTokenBroker(agent_env.harness.broker)
    model = ScriptedChatModel(steps=[call("ticketing_get_ticket", key="PAY-101"), echo_last_tool])
    agent = agent_env.agent(model, broker=broker)
    alice = await agent_env.user("alice")
    await agent.run(alice, await new_thread(agent, alice), "warm up")

    class AlwaysStale(StaleTokenBroker):
        async def get_token(self, identity: Identity, server: str) -> AccessToken:
            self.armed.add(server)
            return await super().get_token(identity, server)

    agent._broker = AlwaysStale(agent_env.harness.broker)
    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")

    assert isinstance(result, Answer)
    assert "Access denied" in result.answer
    assert "ticketing" in result.answer
    assert "refresh" in result.answer


async def test_revoked_access_gives_a_clear_message_and_no_write(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[call("ticketing_close_ticket", key="PAY-104", resolution="fixed"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)

    await agent_env.idp.revoke("alice")
    result = await agent.resume(alice, thread, [{"type": "approve"}])

    assert isinstance(result, Answer)
    assert "Access denied" in result.answer
    assert "ticketing" in result.answer
    assert result.caveats  # the write not run is reported, in people's words (invariant 14)
    assert_only_peoples_words(result)
    tickets = {t.key: t for t in await agent_env.servers.tickets.all_tickets()}
    assert tickets["PAY-104"].status != "closed"
    assert [
        c for c in await agent_env.servers.tickets.all_changes() if c.ticket_key == "PAY-104"
    ] == []


async def test_down_server_is_left_out_with_a_caveat_and_fails_fast(agent_env: AgentEnv) -> None:
    dead = bind_socket()
    dead_url = f"{socket_url(dead)}/mcp"
    dead.close()  # nothing listens there any more
    servers = tuple(
        ServerConfig(s.name, dead_url, s.audience) if s.name == "docs" else s
        for s in agent_env.server_configs
    )
    model = ScriptedChatModel(
        steps=[call("docs_search_docs", query="refund runbook"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    agent = type(agent)(
        replace(agent.config, servers=servers),
        model=model,
        broker=agent_env.harness.broker,
        threads=agent.threads,
        checkpointer=agent.checkpointer,
        policy=agent.policy,
    )
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "find the refund runbook")

    assert isinstance(result, Answer)
    assert any("docs" in c and "unavailable" in c for c in result.caveats)
    assert "docs server is unavailable" in result.answer
    assert not any(name.startswith("docs_") for name in model.bound_tools[-1])
    assert any(name.startswith("ticketing_") for name in model.bound_tools[-1])
    system = model.seen[0][0]
    assert isinstance(system, SystemMessage)
    assert "docs" in system.text
    assert "UNAVAILABLE" in system.text


async def test_call_limit_ends_a_looping_run_cleanly(agent_env: AgentEnv) -> None:
    model = FunctionChatModel(fn=lambda _m: call("ticketing_search_tickets", query="loop"))
    agent = agent_env.agent(model, run_model_call_limit=3)
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "loop forever")

    assert isinstance(result, Answer)
    assert any("call limit" in c for c in result.caveats)
    assert len(model.seen) == 3
    assert result.sources == []


async def test_thread_call_limit_spans_runs(agent_env: AgentEnv) -> None:
    model = FunctionChatModel(fn=lambda _m: final("ok"))
    agent = agent_env.agent(model, thread_model_call_limit=2)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert (await agent.run(alice, thread, "one")).answer == "ok"  # type: ignore[union-attr]
    assert (await agent.run(alice, thread, "two")).answer == "ok"  # type: ignore[union-attr]
    third = await agent.run(alice, thread, "three")
    assert isinstance(third, Answer)
    assert any("call limit" in c for c in third.caveats)
    assert len(model.seen) == 2


async def test_unclassified_tool_needs_approval(agent_env: AgentEnv) -> None:
    policy = ToolPolicy.from_yaml(
        "tools:\n  ticketing_search_tickets: {kind: read}\n"  # get_ticket left unclassified
    )
    model = ScriptedChatModel(steps=[call("ticketing_get_ticket", key="PAY-101"), echo_last_tool])
    agent = agent_env.agent(model, policy=policy)
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")

    assert isinstance(result, Interrupt)
    assert result.action_requests[0].name == "ticketing_get_ticket"
    assert agent.stats.tool_calls == 0


async def test_validation_error_reaches_the_model_with_the_servers_text(
    agent_env: AgentEnv,
) -> None:
    model = ScriptedChatModel(
        steps=[call("ticketing_get_ticket", key="not a key!"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "show ticket 'not a key!'")

    assert isinstance(result, Answer)
    last_tool = tool_results(model.seen[-1])[-1]
    assert last_tool.status == "error"
    assert "ticketing_get_ticket failed" in str(last_tool.content)
    assert "key" in str(last_tool.content).lower()


async def test_missing_scope_is_reported_not_retried(agent_env: AgentEnv) -> None:
    """erin (contractors) may read tickets but not write: the server refuses after approval."""
    model = ScriptedChatModel(
        steps=[call("ticketing_add_comment", key="PAY-101", body="hello"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    erin = await agent_env.user("erin")
    thread = await new_thread(agent, erin)
    assert isinstance(await agent.run(erin, thread, "comment on PAY-101"), Interrupt)

    result = await agent.resume(erin, thread, [{"type": "approve"}])

    assert isinstance(result, Answer)
    comments = next(
        t for t in await agent_env.servers.tickets.all_tickets() if t.key == "PAY-101"
    ).comments
    assert "hello" not in [c.body for c in comments]
    assert "ticketing" in result.answer


async def test_model_outage_is_a_clear_error_and_the_thread_survives(
    agent_env: AgentEnv,
) -> None:
    import pytest

    from agent_core import ModelUnavailableError
    from testing.agent import FailingChatModel

    agent = agent_env.agent(FailingChatModel())
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    with pytest.raises(ModelUnavailableError):
        await agent.run(alice, thread, "hello?")
    healthy = agent_env.agent(
        ScriptedChatModel(steps=[final("back")]),
        threads=agent.threads,
        checkpointer=agent.checkpointer,
    )
    result = await healthy.run(alice, thread, "hello again")
    assert isinstance(result, Answer)
    assert result.answer == "back"


async def test_a_turn_cut_off_by_a_crash_continues_from_its_last_checkpoint(
    agent_env: AgentEnv,
) -> None:
    import asyncio
    import threading

    import pytest
    from langchain_core.messages import HumanMessage, ToolMessage

    from testing.agent import FunctionChatModel, call

    answering_started, release = threading.Event(), threading.Event()

    def stalls_after_the_read(messages: list[Any]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return call("ticketing_get_ticket", key="PAY-101")
        answering_started.set()
        release.wait(10)  # the process "dies" (the task is cancelled) while it waits here
        return final("never delivered")

    agent = agent_env.agent(FunctionChatModel(fn=stalls_after_the_read))
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    first = asyncio.create_task(agent.run(alice, thread, "show ticket PAY-101"))
    assert await asyncio.to_thread(answering_started.wait, 10)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    release.set()

    seen: list[list[Any]] = []

    def answering(messages: list[Any]) -> Any:
        seen.append(list(messages))
        return final("PAY-101 is open", [("ticketing", "PAY-101")])

    restarted = agent_env.agent(
        FunctionChatModel(fn=answering), threads=agent.threads, checkpointer=agent.checkpointer
    )
    result = await restarted.run(alice, thread, "show ticket PAY-101")
    assert isinstance(result, Answer)
    assert result.answer == "PAY-101 is open"
    # The read is not repeated and the question is asked once: the turn went on from the
    # checkpoint after the tool result.
    [messages] = seen
    assert [m.content for m in messages if isinstance(m, HumanMessage)] == ["show ticket PAY-101"]
    assert len([m for m in messages if isinstance(m, ToolMessage)]) == 1
