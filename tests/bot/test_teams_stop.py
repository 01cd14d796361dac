"""Stop from Teams over HTTP against the real core and the reference MCP servers: Teams has no
Stop control, so the requester writes "stop" in the same thread. It takes Slack's path
(``AssistantPort.stop``): the call in flight finishes, nothing after it starts (the servers'
own log says so), pending approvals are withdrawn (the card is PUT "Withdrawn" for everyone),
the thread says what was stopped, and only the thread's owner may stop it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_core.runs import SqlRunRegistry
from assistant.service import Assistant
from assistant.types import AlreadyDecided, Approve
from audit.log import EventKind
from bot.teams.core import ChatUser
from infra.storage import create_engine
from testing.agent import AgentEnv
from testing.teams import (
    APPROVALS_CHANNEL_ID,
    CHANNEL_ID,
    ConnectorCall,
    TeamsUser,
    new_user,
)
from tests.bot.test_slack_e2e import (
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    ops_model,
    real_assistant,
)
from tests.bot.test_slack_stop import CountingModel, HeldReads, audit_events, until
from tests.bot.test_slack_streaming import two_tool_model
from tests.fixtures.teams import RunTeams, TeamsEnv

pytestmark = pytest.mark.timeout(120)

ALICE = new_user("Alice")
BOB = new_user("Bob")
DAVE = new_user("Dave")


def chat(user: TeamsUser) -> ChatUser:
    return ChatUser("teams", user.tenant_id, user.aad_object_id)


@contextlib.asynccontextmanager
async def teams_stack(
    run_teams: RunTeams,
    agents: AgentEnv,
    url: str,
    model: Any = ops_model,
    *,
    durable: bool = False,
) -> AsyncIterator[tuple[TeamsEnv, Assistant]]:
    """The real core (with the run registry Stop needs) behind the Teams app (runs as
    durable jobs with ``durable``)."""
    for name, user in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        await agents.harness.link(name, chat(user))
    engine = create_engine(url)
    try:
        async with (
            real_assistant(agents, url, model, runs=SqlRunRegistry(engine)) as assistant,
            run_teams(
                assistant,
                url,
                durable=durable,
                approvals_conversation_id=APPROVALS_CHANNEL_ID,
            ) as env,
        ):
            env.fake.members[APPROVALS_CHANNEL_ID] = [ALICE, BOB, DAVE]
            yield env, assistant
            await env.bot.adapter.idle()
            await env.bot.adapter.approvals.idle()
    finally:
        await engine.dispose()


def in_thread(root: str, needle: str) -> Callable[[ConnectorCall], bool]:
    conversation = f"{CHANNEL_ID};messageid={root}"
    return lambda c: c.conversation_id == conversation and needle in c.text


async def say(env: TeamsEnv, user: TeamsUser, text: str, root: str | None = None) -> str:
    """``@opsbot text`` from ``user`` (in the thread ``root``); the thread's root id."""
    activity = env.fake.mention(user, text, thread_id=root)
    status, _ = await env.post(activity)
    assert status == 202
    return root or str(activity["id"])


@pytest.mark.parametrize("durable", [False, True], ids=["in-process", "durable"])
async def test_stop_during_a_run_lets_the_call_in_flight_finish_and_starts_nothing_more(
    run_teams: RunTeams,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    durable: bool,
) -> None:
    """With durable runs the "stop" is no job: it never waits behind the run it stops."""
    servers = agent_env.servers
    held = HeldReads(servers, monkeypatch)
    model = CountingModel(two_tool_model)
    async with teams_stack(run_teams, agent_env, sqlite_url, model, durable=durable) as (env, _):
        root = await say(env, ALICE, "what about PAY-101?")
        await asyncio.wait_for(held.entered.wait(), 60)  # get_ticket is at the server
        await say(env, ALICE, "stop", root)

        async def stop_recorded() -> bool:
            return bool(await audit_events(sqlite_url, EventKind.RUN_STOPPED))

        await until(stop_recorded)
        held.release.set()  # the call in flight finishes
        (told,) = await env.fake.wait_for(
            "posted", where=in_thread(root, "Stopped at your request"), wait=60
        )
        await env.fake.settle()
    assert "Done before the stop: ticketing · get ticket PAY-101." in told.text
    assert ":black_square_for_stop:" not in told.text
    # Server-side truth: the call in flight was the last; the docs search never started.
    assert servers.ticketing.server.served == ["get_ticket"]
    assert servers.docs.server.served == []
    assert model.calls == 1  # no model step after the stop
    calls = await audit_events(sqlite_url, EventKind.TOOL_CALL)
    assert [(c.tool, c.outcome) for c in calls] == [("ticketing_get_ticket", "success")]
    (stopped,) = await audit_events(sqlite_url, EventKind.RUN_STOPPED)
    assert (stopped.requester, stopped.outcome) == ("alice", "stopped")
    # No answer was posted for the stopped run.
    assert not [c for c in env.fake.posted() if "runbook" in c.text]


async def ask_for_close(env: TeamsEnv) -> tuple[str, ConnectorCall, str]:
    """Alice asks to close PAY-102: her thread's root, the approval card, its approval id."""
    root = await say(env, ALICE, "close PAY-102")
    (card,) = await env.fake.wait_for(
        "create", where=lambda c: c.conversation_id.startswith(APPROVALS_CHANNEL_ID), wait=60
    )
    await env.fake.settle()
    return root, card, str(card.cards[0]["refresh"]["action"]["data"]["approval_id"])


async def test_stop_while_waiting_withdraws_the_card_for_everyone_and_nothing_is_written(
    run_teams: RunTeams,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    servers = agent_env.servers
    async with teams_stack(run_teams, agent_env, sqlite_url) as (env, assistant):
        root, card, approval_id = await ask_for_close(env)
        await say(env, ALICE, "stop", root)
        updated = await env.fake.wait_for("update", where=lambda c: "Withdrawn" in c.text, wait=60)
        assert updated[-1].activity_id == card.conversation_id.partition(";messageid=")[2]
        assert "alice" in updated[-1].text
        assert "refresh" not in updated[-1].cards[0]  # nobody gets buttons again
        await env.fake.wait_for("posted", where=in_thread(root, "withdrawn"), wait=60)
        await env.fake.settle()
        view = await assistant.approval_view(approval_id)
        assert view is not None
        assert view.status == "withdrawn"
        # A late approval decides nothing; nothing is ever written.
        outcome = await assistant.decide(chat(BOB), approval_id, Approve())
        assert isinstance(outcome, AlreadyDecided)
    assert "close_ticket" not in servers.ticketing.server.served
    assert [c for c in await servers.tickets.all_changes() if c.ticket_key == "PAY-102"] == []
    decisions = await audit_events(sqlite_url, EventKind.DECISION)
    assert [(d.decision, d.approver) for d in decisions] == [("withdrawn", "alice")]


async def test_only_the_requester_can_stop_their_run(
    run_teams: RunTeams,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with teams_stack(run_teams, agent_env, sqlite_url) as (env, assistant):
        root, _card, approval_id = await ask_for_close(env)
        await say(env, DAVE, "stop", root)
        await env.fake.wait_for(
            "posted", where=in_thread(root, "Only the person who asked"), wait=60
        )
        await env.fake.settle()
        assert not [c for c in env.fake.calls_to("update") if "Withdrawn" in c.text]
        view = await assistant.approval_view(approval_id)
        assert view is not None
        assert view.status == "pending"
    assert await audit_events(sqlite_url, EventKind.RUN_STOPPED) == []


async def test_stop_with_nothing_running_says_so(
    run_teams: RunTeams,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with teams_stack(run_teams, agent_env, sqlite_url) as (env, _):
        root = await say(env, ALICE, "show PAY-101")
        await env.fake.wait_for("posted", where=in_thread(root, "PAY-101"), wait=60)
        await env.fake.settle()
        await say(env, ALICE, "stop", root)
        await env.fake.wait_for("posted", where=in_thread(root, "nothing to stop"), wait=60)
