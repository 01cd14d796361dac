"""The error-mapping ``wrap_tool_call`` and read retries, against a fault-injecting server.

Transient failures (5xx, 429, timeouts) of idempotent reads are retried; writes never are,
and a write that failed ambiguously is reported as "outcome unknown".
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, Interrupt, ServerConfig, ToolPolicy
from agent_core.threads import MemoryThreadStore, PlatformRef
from broker import Identity
from testing.agent import (
    FAKE_POLICY,
    FakeBroker,
    FaultPlan,
    ScriptedChatModel,
    call,
    final,
    tool_results,
)

ALICE = Identity("alice")


def echo(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    return final(str(results[-1].content) if results else "none")


def make_agent(url: str, model: Any, **config: Any) -> Agent:
    config.setdefault("retry_initial_delay", 0.0)
    return Agent(
        AgentConfig(servers=(ServerConfig("fake", url, url),), **config),
        model=model,
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
    )


async def run(agent: Agent, text: str) -> Any:
    thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", text), "alice")
    return thread.thread_id, await agent.run(ALICE, thread.thread_id, text)


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_transient_read_failure_is_retried(fake: tuple[str, FaultPlan], status: int) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model, read_retries=2)
    plan.http_failures["lookup"] = [status, status]

    _, result = await run(agent, "look up X-1")

    assert isinstance(result, Answer)
    assert '"status": "ok"' in result.answer
    assert plan.calls["lookup"] == 3


async def test_read_retries_are_bounded_then_reported(fake: tuple[str, FaultPlan]) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model, read_retries=1, breaker_threshold=10)
    plan.http_failures["lookup"] = [503, 503, 503]

    _, result = await run(agent, "look up X-1")

    assert isinstance(result, Answer)
    assert plan.calls["lookup"] == 2
    assert "fake_lookup failed" in result.answer
    assert "Try again later" in result.answer


async def test_read_timeout_is_retried(fake: tuple[str, FaultPlan]) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_slow_lookup", item="X-1", seconds=0.5), echo])
    agent = make_agent(url, model, read_timeout=0.1, read_retries=1, breaker_threshold=10)

    _, result = await run(agent, "slow read")

    assert isinstance(result, Answer)
    assert plan.calls["slow_lookup"] == 2
    assert "timed out" in result.answer


async def test_write_timeout_is_not_retried_and_outcome_is_unknown(
    fake: tuple[str, FaultPlan],
) -> None:
    url, plan = fake
    seen: list[str] = []

    def echo_and_keep(messages: list[BaseMessage]) -> Any:
        seen.extend(str(m.content) for m in tool_results(messages))
        return echo(messages)

    model = ScriptedChatModel(
        steps=[call("fake_slow_change", item="X-1", seconds=1.5), echo_and_keep]
    )
    agent = make_agent(url, model, write_timeout=0.3, read_retries=3)
    thread, pending = await run(agent, "slow write")
    assert isinstance(pending, Interrupt)

    result = await agent.resume(ALICE, thread, [{"type": "approve"}])

    assert isinstance(result, Answer)
    # The request left before the timeout; on a busy machine the server may start it a moment
    # after the client gave up. Once it has, it has it exactly once: no retry followed.
    for _ in range(100):
        if plan.calls.get("slow_change"):
            break
        await asyncio.sleep(0.05)
    assert plan.calls["slow_change"] == 1
    # The model is told to check before retrying; people only read that the outcome is open.
    assert any("Check with a read tool before retrying" in text for text in seen)
    assert "outcome is unknown" in result.answer
    assert "Check with a read tool" not in result.answer
    assert result.actions_taken == [
        "fake_slow_change (item=X-1, seconds=1.5): outcome unknown — being reconciled"
    ]


async def test_write_5xx_without_an_idempotency_key_is_not_retried(
    fake: tuple[str, FaultPlan],
) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_note", item="X-1", text="hi"), echo])
    agent = make_agent(url, model, read_retries=3, write_retry_initial_delay=0.0)
    plan.http_failures["note"] = [503]
    thread, pending = await run(agent, "write")
    assert isinstance(pending, Interrupt)

    result = await agent.resume(ALICE, thread, [{"type": "approve"}])

    assert isinstance(result, Answer)
    assert plan.calls["note"] == 1
    assert "outcome is unknown" in result.answer


async def test_keyed_write_5xx_is_retried_with_the_same_key(fake: tuple[str, FaultPlan]) -> None:
    """An unreachable server gets the approved write again (bounded, with backoff): the
    idempotency key makes the server apply it once whatever reached it."""
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_change", item="X-1"), echo])
    agent = make_agent(url, model, write_retry_initial_delay=0.0)
    plan.http_failures["change"] = [503, 502]
    thread, pending = await run(agent, "write")
    assert isinstance(pending, Interrupt)

    result = await agent.resume(ALICE, thread, [{"type": "approve"}], approval_id="apr-5")

    assert isinstance(result, Answer)
    assert plan.calls["change"] == 3  # two refusals at the door, then the write
    assert "idempotency_key" in result.answer  # the tool's own result reached the model
    assert "outcome is unknown" not in result.answer


async def test_keyed_write_retries_are_bounded(fake: tuple[str, FaultPlan]) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_change", item="X-1"), echo])
    agent = make_agent(url, model, write_retry_initial_delay=0.0, write_attempts=2)
    plan.http_failures["change"] = [503, 503, 503]
    thread, pending = await run(agent, "write")
    assert isinstance(pending, Interrupt)

    result = await agent.resume(ALICE, thread, [{"type": "approve"}], approval_id="apr-6")

    assert isinstance(result, Answer)
    assert plan.calls["change"] == 2
    assert "outcome is unknown" in result.answer


async def test_writes_carry_an_idempotency_key_from_thread_and_call(
    fake: tuple[str, FaultPlan],
) -> None:
    from agent_core import idempotency_key

    url, _plan = fake
    model = ScriptedChatModel(steps=[call("fake_change", "call-fixed", item="X-1"), echo])
    agent = make_agent(url, model)
    thread, pending = await run(agent, "write")
    assert isinstance(pending, Interrupt)
    assert "idempotency_key" not in pending.action_requests[0].args
    assert "idempotency_key" not in (agent.tool_schema("fake_change") or {})["properties"]

    result = await agent.resume(ALICE, thread, [{"type": "approve"}], approval_id="apr-9")

    assert isinstance(result, Answer)
    assert idempotency_key("apr-9", "call-fixed") in result.answer
    assert idempotency_key("apr-9", "call-fixed") != idempotency_key(thread, "call-fixed")


async def test_circuit_breaker_opens_and_the_server_is_left_out(
    fake: tuple[str, FaultPlan],
) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model, read_retries=2, breaker_threshold=3)
    plan.http_failures["lookup"] = [503, 503, 503]
    _, first = await run(agent, "first")
    assert isinstance(first, Answer)
    assert await agent.health.is_open("fake")

    model.steps = [call("fake_lookup", item="X-1"), echo]
    _, second = await run(agent, "second")

    assert isinstance(second, Answer)
    assert plan.calls["lookup"] == 3  # nothing more reached the server
    assert any("fake" in c and "unavailable" in c for c in second.caveats)
    assert "unavailable" in second.answer
    assert "fake_lookup" not in model.bound_tools[-1]


async def test_each_run_sends_its_own_users_token(fake: tuple[str, FaultPlan]) -> None:
    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model)
    for user in ("alice", "bob"):
        thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", user), user)
        await agent.run(Identity(user), thread.thread_id, f"look up for {user}")
    assert set(plan.auth) == {"Bearer tok-alice-fake", "Bearer tok-bob-fake"}


async def test_identity_service_outage_is_transient_not_missing_access(
    fake: tuple[str, FaultPlan],
) -> None:
    from broker import AccessToken, BrokerUnavailableError

    class FlakyBroker(FakeBroker):
        failures: int = 1

        async def get_token(self, identity: Identity, server: str) -> AccessToken:
            if self.failures:
                self.failures -= 1
                raise BrokerUnavailableError("identity provider unreachable")
            return await super().get_token(identity, server)

    url, plan = fake
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model, read_retries=1)
    agent.cache.put(await _discovered(url))
    agent._broker = FlakyBroker(audiences={"fake": url})

    _, result = await run(agent, "look up X-1")

    assert isinstance(result, Answer)
    assert '"status": "ok"' in result.answer  # retried once the IdP answered
    assert plan.calls["lookup"] == 1


async def _discovered(url: str) -> Any:
    """The fake server's tools, discovered with a throwaway agent (warm cache for the test)."""
    warm = make_agent(url, ScriptedChatModel(steps=[final("ok")]))
    await run(warm, "warm")
    return warm.cache.get("fake")
