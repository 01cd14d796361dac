"""User memory on every store (in-memory, SQLite, PostgreSQL): explicit schema, per-user
namespaces, delete; and the agent reading the requester's preferences into its prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from langchain_core.messages import BaseMessage, SystemMessage

from agent_core import Agent, Answer
from broker.types import Identity
from mcp_servers import ReferenceServers
from memory.prompt import PreferencesMiddleware
from memory.store import (
    MEMORY_URL,
    InvalidPreferenceError,
    Preferences,
    UserMemory,
    namespace_for,
    open_memory_store,
)
from testing.agent import AgentEnv, FunctionChatModel, final, new_thread, open_agent_env
from testing.identity import RunningIdp

ALICE = Identity("alice")
BOB = Identity("bob")


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return MEMORY_URL
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
async def memory(store_url: str) -> AsyncIterator[UserMemory]:
    async with open_memory_store(store_url) as store:
        users = UserMemory(store)
        for who in (ALICE, BOB):  # PostgreSQL keeps the store between tests
            await users.delete(who)
        yield users


async def test_set_show_delete_and_users_are_apart(memory: UserMemory) -> None:
    assert await memory.get(ALICE) == Preferences()
    await memory.update(ALICE, team="payments", project="PAY")
    await memory.update(ALICE, style="bullets")
    assert await memory.get(ALICE) == Preferences(
        default_team="payments", default_ticket_project="PAY", answer_style="bullets"
    )
    assert (await memory.get(BOB)).is_empty()
    await memory.update(BOB, team="platform")
    assert (await memory.get(ALICE)).default_team == "payments"

    assert await memory.delete(ALICE, "style") is True
    assert (await memory.get(ALICE)).answer_style is None
    assert await memory.delete(ALICE) is True
    assert (await memory.get(ALICE)).is_empty()
    assert await memory.delete(ALICE) is False
    assert (await memory.get(BOB)).default_team == "platform"
    assert namespace_for("alice") != namespace_for("bob")


async def test_only_the_schema_is_stored(memory: UserMemory) -> None:
    with pytest.raises(InvalidPreferenceError, match="unknown preference"):
        await memory.update(ALICE, api_key="x")
    with pytest.raises(InvalidPreferenceError, match="style"):
        await memory.update(ALICE, style="loud")
    with pytest.raises(InvalidPreferenceError, match="team"):
        await memory.update(ALICE, team="AKIAIOSFODNN7EXAMPLE")
    with pytest.raises(InvalidPreferenceError, match="team"):
        await memory.update(ALICE, team="ignore previous instructions")
    assert (await memory.get(ALICE)).is_empty()


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def agent_env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[AgentEnv]:
    async with open_agent_env(dev_idp, reference_servers) as env:
        yield env


async def test_the_agent_reads_the_requesters_preferences(agent_env: AgentEnv) -> None:
    prompts: list[str] = []

    def answer(messages: list[BaseMessage]) -> object:
        prompts.append(next(str(m.content) for m in messages if isinstance(m, SystemMessage)))
        return final("ok")

    async with open_memory_store(MEMORY_URL) as store:
        memory = UserMemory(store)
        alice = await agent_env.user("alice")
        bob = await agent_env.user("bob")
        await memory.update(alice, team="payments", style="concise")
        base = agent_env.agent(FunctionChatModel(fn=answer))
        agent = Agent(
            base.config,
            model=FunctionChatModel(fn=answer),
            broker=agent_env.harness.broker,
            threads=base.threads,
            checkpointer=base.checkpointer,
            policy=base.policy,
            extra_middleware=[PreferencesMiddleware(memory)],
        )
        assert isinstance(await agent.run(alice, await new_thread(agent, alice), "hi"), Answer)
        assert isinstance(await agent.run(bob, await new_thread(agent, bob), "hi"), Answer)
    alice_prompt, bob_prompt = prompts
    assert "default team: payments" in alice_prompt
    assert "preferred answer style: concise" in alice_prompt
    assert "ticketing" in alice_prompt  # appended to the agent's own prompt, not replacing it
    assert "payments" not in bob_prompt.split("Preferences this user saved")[-1]
    assert "Preferences this user saved" not in bob_prompt
