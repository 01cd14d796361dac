"""One approval, cards on Slack and Teams, the real core: the first decision wins on either
platform, the other platform is told (durably, once), a second click changes nothing, and the
ticket is written once (ground truth: the ticketing server's change log)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

import pytest
from test_approvals_assistant import REF, Clock, chat
from test_approvals_end_to_end import close_model

from agent_core import Agent, AgentConfig, ToolPolicy
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import SqlThreadStore
from approvals import SqlApprovalStore
from approvals.service import ApprovalService
from assistant.fanout import ApprovalFanout, SqlApprovalNotices
from assistant.service import Assistant
from assistant.types import (
    AlreadyDecided,
    ApprovalNotice,
    ApprovalRequested,
    Approve,
    Decided,
)
from audit import AuditLog, AuditObserver, SqlAuditSink
from broker import ChatUser, LocalIdentityService
from infra.storage import create_engine
from testing.agent import AgentEnv

pytestmark = pytest.mark.timeout(120)

BOB_ON_TEAMS = ChatUser("teams", "tenant-1", "aad-bob")


@contextlib.asynccontextmanager
async def assistant(env: AgentEnv, url: str, clock: Clock) -> AsyncIterator[Assistant]:
    engine = create_engine(url)
    identities = LocalIdentityService(env.harness.broker, env.harness.linking)
    try:
        async with open_checkpointer(url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            threads = SqlThreadStore(engine)
            agent = Agent(
                AgentConfig(servers=env.server_configs, retry_initial_delay=0.0),
                model=close_model(),
                broker=identities,
                threads=threads,
                checkpointer=saver,
                policy=ToolPolicy.load(),
                observer=AuditObserver(log),
            )
            service = ApprovalService(
                SqlApprovalStore(engine),
                log,
                agent,
                agent,
                identities.resolve_subject,
                identities,
                clock=clock,
            )
            fanout = ApprovalFanout(
                SqlApprovalNotices(engine, clock),
                card_platforms=frozenset({"slack", "teams"}),
                clock=clock,
            )
            yield Assistant(identities, threads, agent, service, clock=clock, fanout=fanout)
    finally:
        await engine.dispose()


async def drain(bot: Assistant, platform: str) -> list[ApprovalNotice]:
    got: list[ApprovalNotice] = []

    async def handle(notice: ApprovalNotice) -> None:
        got.append(notice)

    await bot.deliver_notices(platform, handle)
    return got


async def test_approved_on_teams_is_shown_on_slack_and_a_slack_click_changes_nothing(
    agent_env: AgentEnv, database_url: str
) -> None:
    await agent_env.user("alice")
    await agent_env.user("bob")
    await agent_env.harness.link("bob", BOB_ON_TEAMS)  # one person, both platforms
    async with assistant(agent_env, database_url, Clock()) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "Close PAY-104, the alert is fixed")
        assert isinstance(reply, ApprovalRequested)
        approval_id = reply.approval.approval_id
        # Teams is asked to post its copy; Slack (the requester's platform) posts its own.
        posts = await drain(bot, "teams")
        assert [(n.kind, n.approval_id) for n in posts] == [("post", approval_id)]
        assert await drain(bot, "slack") == []

        done = await bot.decide(BOB_ON_TEAMS, approval_id, Approve())
        assert isinstance(done, Decided)
        assert (done.decided_by, done.state) == ("bob", "succeeded")
        # Teams shows it on its own card (the click's answer); Slack is told.
        assert await drain(bot, "teams") == []
        [notice] = await drain(bot, "slack")
        assert notice.kind == "decided"
        assert notice.decided == replace(done, siblings=())
        assert notice.decided.requester_ref == REF  # Slack tells alice in her thread

        again = await bot.decide(chat("bob"), approval_id, Approve())
        assert again == AlreadyDecided("bob")
        assert await drain(bot, "slack") == []
        assert await drain(bot, "teams") == []
        changes = await agent_env.servers.tickets.all_changes()
        assert len([c for c in changes if c.tool == "close_ticket"]) == 1


async def test_an_expiry_swept_by_slack_reaches_the_teams_card(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    await agent_env.user("alice")
    clock = Clock()
    async with assistant(agent_env, sqlite_url, clock) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "Close PAY-104, the alert is fixed")
        assert isinstance(reply, ApprovalRequested)
        await drain(bot, "teams")
        clock.offset = timedelta(minutes=31)
        shown: list[Decided] = []

        async def slack_announce(decided: Decided) -> None:
            shown.append(decided)

        [expired] = await bot.sweep_and_notify(slack_announce, platform="slack")
        assert shown == [expired]
        [notice] = await drain(bot, "teams")
        assert notice.decided is not None
        assert (notice.decided.decision, notice.approval_id) == (
            "expired",
            reply.approval.approval_id,
        )
        assert await drain(bot, "slack") == []  # Slack's sweeper showed it already
