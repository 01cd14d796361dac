"""Stop (Slack's ``agent_session_stopped``) over HTTP against the real core and the reference
MCP servers: the run stops where it is — the call in flight finishes and is audited, nothing
after it starts (the servers' own log says so) — its pending approvals are withdrawn (cards
updated "withdrawn by alice"), and the thread says what was stopped. The stop reaches a run
on another instance through the database."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from agent_core.runs import SqlRunRegistry
from audit import AuditLog, SqlAuditSink
from audit.log import AuditEvent, AuditQuery, EventKind
from infra.storage import create_engine
from mcp_servers import ReferenceServers
from testing.agent import AgentEnv
from testing.slack import APPROVALS_CHANNEL_ID, TEAM_ID, mention
from tests.bot.conftest import RunApp, SlackEnv
from tests.bot.test_slack_e2e import (
    ALICE,
    BOB,
    DAVE,
    _click,
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    ops_model,
    real_assistant,
)
from tests.bot.test_slack_events import _texts
from tests.bot.test_slack_streaming import CHANNEL, agent_stack, stream_of, tasks, two_tool_model


def session_stopped(user: str, thread_ts: str, channel: str = CHANNEL) -> dict[str, Any]:
    """Slack's event when someone presses Stop on the agent session of a thread."""
    return {
        "type": "agent_session_stopped",
        "user": user,
        "channel": channel,
        "thread_ts": thread_ts,
        "event_ts": f"{time.time():.6f}",
        "team": TEAM_ID,
    }


class HeldReads:
    """Holds the ticketing server's ``get_ticket`` in flight until ``release``."""

    def __init__(self, servers: ReferenceServers, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        original: Callable[..., Awaitable[Any]] = servers.tickets.get

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            await self.release.wait()
            return await original(*args, **kwargs)

        monkeypatch.setattr(servers.tickets, "get", held)


class CountingModel:
    def __init__(self, fn: Callable[[list[BaseMessage]], AIMessage]) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        self.calls += 1
        return self.fn(messages)


async def audit_events(url: str, *kinds: EventKind) -> list[AuditEvent]:
    engine = create_engine(url)
    try:
        return await AuditLog(SqlAuditSink(engine)).query(AuditQuery(kinds=kinds, limit=500))
    finally:
        await engine.dispose()


async def until(check: Callable[[], Awaitable[bool]], wait: float = 30.0) -> None:
    deadline = time.monotonic() + wait
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def other_instance(
    run_app: RunApp, agents: AgentEnv, url: str, model: Any
) -> AsyncIterator[SlackEnv]:
    """A second opsbot instance on the same database (its own agent, app and port; with
    durable runs either instance may run a message)."""
    engine = create_engine(url)
    try:
        async with (
            real_assistant(agents, url, model, runs=SqlRunRegistry(engine)) as assistant,
            run_app(assistant, url) as env,
        ):
            yield env
    finally:
        await engine.dispose()


async def _stop_in_flight(
    run_app: RunApp,
    agents: AgentEnv,
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    stop_elsewhere: bool,
) -> None:
    servers = agents.servers
    held = HeldReads(servers, monkeypatch)
    model = CountingModel(two_tool_model)
    async with agent_stack(run_app, agents, url, model) as (env, _):
        async with other_instance(run_app, agents, url, model) as elsewhere:
            stopper = elsewhere if stop_elsewhere else env
            ts = "1700020000.0001"
            await env.sender.post_event(
                mention(ALICE.user_id, "what about PAY-101?", channel=CHANNEL, ts=ts)
            )
            await asyncio.wait_for(held.entered.wait(), 60)  # get_ticket is at the server
            status, _ = await stopper.sender.post_event(session_stopped(ALICE.user_id, ts))
            assert status == 200

            async def stop_recorded() -> bool:
                return bool(await audit_events(url, EventKind.RUN_STOPPED))

            await until(stop_recorded)
            held.release.set()  # the call in flight finishes
            await env.fake.wait_for("chat.stopStream", wait=60)
            await env.fake.settle()
        # Server-side truth: the call in flight was the last; the docs search never started.
        assert servers.ticketing.server.served == ["get_ticket"]
        assert servers.docs.server.served == []
        assert model.calls == 1  # no model step after the stop
        # The call in flight finished and is in the audit log, as a success.
        calls = await audit_events(url, EventKind.TOOL_CALL)
        assert [(c.tool, c.outcome) for c in calls] == [("ticketing_get_ticket", "success")]
        (stopped,) = await audit_events(url, EventKind.RUN_STOPPED)
        assert (stopped.requester, stopped.outcome) == ("alice", "stopped")
        # The thread says what was stopped; its task is complete.
        _key, chunks = stream_of(env, ts)
        assert tasks(chunks) == [
            ("ticketing · get ticket PAY-101", "in_progress"),
            ("ticketing · get ticket PAY-101", "complete"),
        ]
        text = "".join(c["text"] for c in chunks if c["type"] == "markdown_text")
        assert "Stopped at your request" in text
        assert "Done before the stop: ticketing · get ticket PAY-101." in text
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "closed"]


async def test_stop_during_a_run_lets_the_call_in_flight_finish_and_starts_nothing_more(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _stop_in_flight(run_app, agent_env, sqlite_url, monkeypatch, stop_elsewhere=False)


@pytest.mark.postgres
async def test_stop_received_by_another_instance_stops_the_run_through_the_database(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _stop_in_flight(run_app, agent_env, postgres_url, monkeypatch, stop_elsewhere=True)


async def test_stop_while_waiting_withdraws_the_pending_card_and_the_thread_goes_on(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    servers = agent_env.servers
    async with agent_stack(run_app, agent_env, sqlite_url) as (env, assistant):
        ts = "1700020100.0001"
        await env.sender.post_event(mention(ALICE.user_id, "close PAY-102", channel=CHANNEL, ts=ts))
        await env.fake.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle()
        (card_key,) = [k for k in env.fake.messages if k[0] == APPROVALS_CHANNEL_ID]
        card = dict(env.fake.messages[card_key])
        approval_id = next(
            e["value"] for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]
        )
        status, _ = await env.sender.post_event(session_stopped(ALICE.user_id, ts))
        assert status == 200
        updated = await env.fake.wait_for(
            "chat.update",
            where=lambda p: p["channel"] == APPROVALS_CHANNEL_ID and "Withdrawn" in p["text"],
            wait=60,
        )
        assert "Withdrawn* by alice" in _texts(updated[-1]["blocks"])
        told = await env.fake.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == CHANNEL and "withdrawn" in p["text"],
            wait=60,
        )
        assert told[0]["thread_ts"] == ts
        assert "nothing was run" in told[0]["text"]
        await env.fake.settle()
        view = await assistant.approval_view(approval_id)
        assert view is not None
        assert view.status == "withdrawn"
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "suspended", "closed"]
        # An approver's late click decides nothing; nothing is ever written.
        await _click(env, BOB.user_id, "approval_approve", card)
        refused = await env.fake.wait_for("chat.postEphemeral", wait=60)
        assert "already decided" in refused[-1]["text"]
        await env.fake.settle()
        assert "close_ticket" not in servers.ticketing.server.served
        assert [c for c in await servers.tickets.all_changes() if c.ticket_key == "PAY-102"] == []
        decisions = await audit_events(sqlite_url, EventKind.DECISION)
        assert [(d.decision, d.approver) for d in decisions] == [("withdrawn", "alice")]
        finished = await audit_events(sqlite_url, EventKind.APPROVAL_FINISHED)
        assert [f.outcome for f in finished] == ["withdrawn"]
        # The paused run was closed cleanly: the same thread answers the next question.
        await env.sender.post_event(
            mention(
                ALICE.user_id,
                "show PAY-101",
                channel=CHANNEL,
                ts="1700020100.0002",
                thread_ts=ts,
            )
        )
        answers = await env.fake.wait_for("chat.stopStream", 2, wait=60)
        assert "PAY-101" in answers[-1]["markdown_text"]


async def test_only_the_requester_can_stop_their_run(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with agent_stack(run_app, agent_env, sqlite_url, ops_model) as (env, _):
        ts = "1700020200.0001"
        await env.sender.post_event(mention(ALICE.user_id, "close PAY-102", channel=CHANNEL, ts=ts))
        await env.fake.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle()
        await env.sender.post_event(session_stopped(DAVE.user_id, ts))
        (refusal,) = await env.fake.wait_for("chat.postEphemeral", wait=60)
        assert refusal["user"] == DAVE.user_id
        assert "Only the person who asked" in refusal["text"]
        await env.fake.settle()
        card = next(m for k, m in env.fake.messages.items() if k[0] == APPROVALS_CHANNEL_ID)
        assert "Withdrawn" not in _texts(card["blocks"])
        assert await audit_events(sqlite_url, EventKind.RUN_STOPPED) == []


async def test_stop_during_an_approved_write_lets_it_finish_and_skips_the_next_model_step(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    servers = agent_env.servers
    entered, release = asyncio.Event(), asyncio.Event()
    original = servers.tickets.close_ticket

    async def held_close(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await original(*args, **kwargs)

    monkeypatch.setattr(servers.tickets, "close_ticket", held_close)
    model = CountingModel(ops_model)
    async with agent_stack(run_app, agent_env, sqlite_url, model) as (env, _):
        ts = "1700020300.0001"
        await env.sender.post_event(mention(ALICE.user_id, "close PAY-102", channel=CHANNEL, ts=ts))
        await env.fake.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle()
        steps_before = model.calls
        (card_key,) = [k for k in env.fake.messages if k[0] == APPROVALS_CHANNEL_ID]
        await _click(env, BOB.user_id, "approval_approve", env.fake.messages[card_key])
        await asyncio.wait_for(entered.wait(), 60)  # the approved write is at the server
        await env.sender.post_event(session_stopped(ALICE.user_id, ts))

        async def stop_recorded() -> bool:
            return bool(await audit_events(sqlite_url, EventKind.RUN_STOPPED))

        await until(stop_recorded)
        release.set()
        told = await env.fake.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == CHANNEL and "Stopped at your request" in p["text"],
            wait=60,
        )
        await env.fake.settle()
        assert told[0]["thread_ts"] == ts
        assert model.calls == steps_before  # the answer after the write was never asked for
        # The approved write ran once and is recorded as done.
        assert servers.ticketing.server.served == ["get_ticket", "close_ticket"]
        changes = [c for c in await servers.tickets.all_changes() if c.ticket_key == "PAY-102"]
        assert [c.tool for c in changes] == ["close_ticket"]
        outcomes = await audit_events(sqlite_url, EventKind.WRITE_OUTCOME)
        assert [(o.tool, o.outcome) for o in outcomes] == [("ticketing_close_ticket", "success")]
        (finished,) = await audit_events(sqlite_url, EventKind.APPROVAL_FINISHED)
        assert finished.outcome == "succeeded"
