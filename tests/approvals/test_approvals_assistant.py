"""The façade chat adapters call, end to end: dev IdP, a real broker and identity service,
the reference servers, the real agent (scripted model), approvals and audit in SQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from test_approvals_end_to_end import close_model

from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import PlatformRef, SqlThreadStore
from approvals import SqlApprovalStore
from approvals.service import ApprovalService
from assistant.service import Assistant
from assistant.types import (
    AlreadyDecided,
    Answered,
    ApprovalRequested,
    Approve,
    Decided,
    Edit,
    Expired,
    InvalidEdit,
    LinkRequired,
    NotAuthorised,
    Refused,
    Reject,
)
from audit import AuditLog, AuditObserver, SqlAuditSink
from broker import ChatUser, LocalIdentityService
from infra.clock import utc_now
from infra.storage import create_engine
from testing.agent import (
    FAKE_POLICY,
    AgentEnv,
    ScriptedChatModel,
    call,
    fake_mcp_server,
    final,
    tool_results,
)

REF = PlatformRef("slack", "T-TEST", "C-OPS", "1712.0001")


def chat(name: str) -> ChatUser:
    return ChatUser("slack", "T-TEST", f"U-{name}")


@dataclass
class Clock:
    offset: timedelta = timedelta()

    def __call__(self):  # type: ignore[no-untyped-def]
        return utc_now() + self.offset


@contextlib.asynccontextmanager
async def assistant(
    env: AgentEnv,
    url: str,
    clock: Clock,
    servers: tuple[str, ...] = (),
    *,
    model: ScriptedChatModel | None = None,
    policy: ToolPolicy | None = None,
    only: tuple[ServerConfig, ...] = (),
) -> AsyncIterator[Assistant]:
    engine = create_engine(url)
    identities = LocalIdentityService(env.harness.broker, env.harness.linking)
    try:
        async with open_checkpointer(url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            threads = SqlThreadStore(engine)
            agent = Agent(
                AgentConfig(servers=only or env.server_configs, retry_initial_delay=0.0),
                model=model or close_model(),
                broker=identities,
                threads=threads,
                checkpointer=saver,
                policy=policy or ToolPolicy.load(),
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
            yield Assistant(
                identities, threads, agent, service, clock=clock, exchange_servers=servers
            )
    finally:
        await engine.dispose()


async def test_unlinked_users_are_asked_to_connect(agent_env: AgentEnv, sqlite_url: str) -> None:
    async with assistant(agent_env, sqlite_url, Clock()) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "show ticket PAY-104")
        assert isinstance(reply, LinkRequired)
        assert reply.login_url.startswith(agent_env.idp.issuer)
        assert isinstance(await bot.decide(chat("bob"), "whatever", Approve()), LinkRequired)
        assert not (await bot.status(chat("alice"))).linked


async def test_request_view_decide_and_answer_the_requester(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    for name in ("alice", "bob", "carol", "dave"):
        await agent_env.user(name)
    async with assistant(agent_env, sqlite_url, Clock()) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "Close PAY-104, the alert is fixed")
        assert isinstance(reply, ApprovalRequested)
        approval_id = reply.approval.approval_id
        assert (reply.approval.tool, reply.approval.server) == (
            "ticketing_close_ticket",
            "ticketing",
        )

        view = await bot.approval_view(approval_id)
        assert view is not None
        assert view.args == {"key": "PAY-104", "resolution": "Alert fixed"}
        assert view.requester == "alice"
        assert view.requester_ref == REF
        assert any("PAY-104" in r for r in view.reads)
        assert "resolution" in view.input_schema["properties"]
        assert "idempotency_key" not in view.input_schema["properties"]
        assert [v.approval_id for v in await bot.pending_for(chat("alice"))] == [approval_id]
        assert [v.approval_id for v in await bot.awaiting_approver(chat("bob"))] == [approval_id]
        assert await bot.awaiting_approver(chat("dave")) == []
        assert await bot.awaiting_approver(chat("alice")) == []  # sensitive: not her own

        # Someone else writing in alice's thread is refused.
        intruder = await bot.handle_message(chat("dave"), REF, "show ticket PAY-104")
        assert isinstance(intruder, Refused)

        assert isinstance(await bot.decide(chat("dave"), approval_id, Approve()), NotAuthorised)
        bad = await bot.decide(chat("bob"), approval_id, Edit({"key": "PAY-104"}))
        assert isinstance(bad, InvalidEdit)
        assert "resolution" in bad.field_errors

        done = await bot.decide(chat("bob"), approval_id, Approve())
        assert isinstance(done, Decided)
        assert (done.decision, done.decided_by, done.outcome) == ("approved", "bob", "succeeded")
        assert done.requester_ref == REF
        assert isinstance(done.requester_result, Answered)

        again = await bot.decide(chat("carol"), approval_id, Approve())
        assert again == AlreadyDecided("bob")
        assert await bot.pending_for(chat("alice")) == []


async def test_the_sweeper_answers_the_requester_in_their_thread(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    for name in ("alice", "bob"):
        await agent_env.user(name)
    clock = Clock()
    async with assistant(agent_env, sqlite_url, clock) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "Close PAY-104, the alert is fixed")
        assert isinstance(reply, ApprovalRequested)
        clock.offset = timedelta(minutes=31)
        [expired] = await bot.sweep()
        assert expired.decision == "expired"
        assert expired.outcome == "expired"
        assert expired.requester_ref == REF
        assert isinstance(expired.requester_result, Answered)
        late = await bot.decide(chat("bob"), reply.approval.approval_id, Approve())
        assert isinstance(late, Expired)
        changes = await agent_env.servers.tickets.all_changes()
        assert [c for c in changes if c.tool == "close_ticket"] == []


pytestmark = pytest.mark.timeout(120)


async def test_the_in_process_sweeper_notifies_requesters(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    await agent_env.user("alice")
    clock = Clock()
    async with assistant(agent_env, sqlite_url, clock) as bot:
        reply = await bot.handle_message(chat("alice"), REF, "Close PAY-104, the alert is fixed")
        assert isinstance(reply, ApprovalRequested)
        notices: asyncio.Queue[Decided] = asyncio.Queue()
        sweeper = asyncio.create_task(bot.sweep_forever(0.01, notices.put))
        try:
            clock.offset = timedelta(minutes=31)
            notice = await asyncio.wait_for(notices.get(), timeout=30)
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        assert notice.approval_id == reply.approval.approval_id
        assert notice.decision == "expired"
        assert notice.requester_ref == REF
        assert notices.empty()


async def test_my_requests_newest_first_in_any_state_and_connections_per_server(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    """App Home's data: the requester's latest requests (decided ones too, newest first)
    and, per server, whether opsbot gets a token for the user there now."""
    for name in ("alice", "bob"):
        await agent_env.user(name)
    servers = (*(s.name for s in agent_env.server_configs), "nowhere")
    ask = "Close PAY-104, the alert is fixed"
    async with assistant(agent_env, sqlite_url, Clock(), servers) as bot:
        assert await bot.my_requests(chat("carol")) == []  # not linked
        assert await bot.connections(chat("carol")) == []
        first = await bot.handle_message(chat("alice"), REF, ask)
        assert isinstance(first, ApprovalRequested)
        rejected = await bot.decide(chat("bob"), first.approval.approval_id, Reject("not now"))
        assert isinstance(rejected, Decided)
    # a second request, in another thread (a new run of the scripted model)
    async with assistant(agent_env, sqlite_url, Clock(), servers) as bot:
        other = PlatformRef("slack", "T-TEST", "C-OPS", "1712.0002")
        second = await bot.handle_message(chat("alice"), other, ask)
        assert isinstance(second, ApprovalRequested)
        mine = await bot.my_requests(chat("alice"))
        assert [v.approval_id for v in mine] == [
            second.approval.approval_id,
            first.approval.approval_id,
        ]
        assert [v.state for v in mine] == ["pending", "rejected"]
        assert mine[1].args == {"key": "PAY-104", "resolution": "Alert fixed"}
        assert await bot.my_requests(chat("bob")) == []
        latest = await bot.my_requests(chat("alice"), limit=1)
        assert [v.approval_id for v in latest] == [second.approval.approval_id]

        shown = {c.server: c for c in await bot.connections(chat("alice"))}
        assert list(shown) == list(servers)
        assert all(shown[s.name].connected for s in agent_env.server_configs)
        assert not shown["nowhere"].connected
        assert shown["nowhere"].problem == "not reachable as you right now"


@pytest.mark.parametrize("auth", ["static", "none"])
async def test_an_approved_write_on_a_server_without_token_exchange_runs(
    agent_env: AgentEnv, sqlite_url: str, auth: str
) -> None:
    """Issue 19: a ``static`` or ``none`` server's unclassified tools are writes, so they wait
    for an approver; the approval must then run them. It minted the requester's fresh token
    for every server with a write, and the broker mints only for ``exchange`` servers: every
    such approved write ended ``failed`` ("the requester's access to fake was refused")."""
    for name in ("alice", "bob"):
        await agent_env.user(name)
    async with fake_mcp_server() as (url, plan):
        server = ServerConfig(
            "fake", url, auth=auth, header_value="svc-key" if auth == "static" else None
        )

        def answer(messages: list[Any]) -> Any:
            results = tool_results(messages)
            return final(str(results[-1].content) if results else "nothing ran")

        model = ScriptedChatModel(
            steps=[call("fake_change", item="X-1", idempotency_key="k-1"), answer]
        )
        policy = ToolPolicy.from_yaml(FAKE_POLICY)
        async with assistant(
            agent_env, sqlite_url, Clock(), model=model, policy=policy, only=(server,)
        ) as bot:
            reply = await bot.handle_message(chat("alice"), REF, "change X-1")
            assert isinstance(reply, ApprovalRequested)
            done = await bot.decide(chat("bob"), reply.approval.approval_id, Approve())
            assert isinstance(done, Decided)
            assert (done.decision, done.outcome) == ("approved", "succeeded"), done
            assert plan.calls["change"] == 1
            # The server saw opsbot's service key (static) or nothing (none), never a user's.
            assert set(plan.auth) == ({"svc-key"} if auth == "static" else {""})
