"""Approvals end to end over HTTP: dev IdP, the reference ticketing server, a real broker, the
real ``Agent`` with a scripted model, approvals and audit in SQL (PostgreSQL where it matters).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from langgraph.types import Command
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core import Agent, Answer, Interrupt
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import PlatformRef, SqlThreadStore
from approvals import (
    ActionDecision,
    AlreadyDecidedError,
    ApprovalStatus,
    InvalidEditError,
    NotAuthorisedError,
    SqlApprovalStore,
)
from approvals.service import ApprovalService
from audit import AuditLog, AuditObserver, AuditQuery, EventKind, SqlAuditSink
from audit.reconcile import McpChangeLog, Reconciler
from broker import Identity
from infra.clock import utc_now
from infra.storage import create_engine
from testing.agent import AgentEnv, ScriptedChatModel, call, final, tool_results

APPROVE = ActionDecision("approve")


@pytest.fixture
def checkpoint_url(postgres_server_url: str, fresh_postgres_database: str) -> str:
    """A separate PostgreSQL database for the LangGraph checkpointer, so its tables stay out
    of the migrated opsbot database the other tests compare with the schema."""
    url = make_url(postgres_server_url).set(database=fresh_postgres_database)
    return url.render_as_string(hide_password=False)


USERS = ("alice", "bob", "carol", "dave")


def close_model() -> ScriptedChatModel:
    def answer(messages: list[Any]) -> Any:
        results = tool_results(messages)
        return final(str(results[-1].content) if results else "nothing ran")

    return ScriptedChatModel(
        steps=[
            call("ticketing_get_ticket", key="PAY-104"),
            call("ticketing_close_ticket", key="PAY-104", resolution="Alert fixed"),
            answer,
        ]
    )


@dataclass
class Instance:
    """One app instance: its own engine, checkpointer pool, agent and approval service."""

    engine: AsyncEngine
    agent: Agent
    service: ApprovalService
    log: AuditLog


@contextlib.asynccontextmanager
async def instance(
    env: AgentEnv,
    url: str,
    users: dict[str, Identity],
    model: ScriptedChatModel,
    checkpoints: str | None = None,
) -> AsyncIterator[Instance]:
    engine = create_engine(url)
    try:
        async with open_checkpointer(checkpoints or url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            agent = env.agent(model, threads=SqlThreadStore(engine), checkpointer=saver)
            agent._observer = AuditObserver(log)
            service = ApprovalService(
                SqlApprovalStore(engine),
                log,
                agent,
                agent,
                _lookup(users),
                env.harness.broker,
            )
            yield Instance(engine, agent, service, log)
    finally:
        await engine.dispose()


def _lookup(users: dict[str, Identity]) -> Any:
    async def lookup(subject: str) -> Identity:
        return users[subject]

    return lookup


async def link_all(env: AgentEnv) -> dict[str, Identity]:
    return {name: await env.user(name) for name in USERS}


async def closes(env: AgentEnv, key: str = "PAY-104") -> list[Any]:
    return [
        c
        for c in await env.servers.tickets.all_changes()
        if c.ticket_key == key and c.tool == "close_ticket"
    ]


async def request_close(one: Instance, alice: Identity) -> tuple[str, Interrupt]:
    threads = SqlThreadStore(one.engine)
    thread = await threads.get_or_create(PlatformRef("slack", "T-TEST", "C1", "17.1"), "alice")
    result = await one.agent.run(alice, thread.thread_id, "Close PAY-104, the alert is fixed")
    assert isinstance(result, Interrupt)
    approval = await one.service.open(result, alice)
    return approval.approval_id, result


@pytest.mark.postgres
async def test_fifty_concurrent_approvals_on_two_instances_write_once(
    agent_env: AgentEnv, postgres_url: str, checkpoint_url: str
) -> None:
    users = await link_all(agent_env)
    model = close_model()
    async with (
        instance(agent_env, postgres_url, users, model, checkpoint_url) as first,
        instance(agent_env, postgres_url, users, model, checkpoint_url) as second,
    ):
        approval_id, _ = await request_close(first, users["alice"])
        # Instance two has never run a turn: it still decides from the shared database.
        clicks = [
            (first if i % 2 else second).service.decide(
                users["bob" if i % 3 else "carol"], approval_id, APPROVE
            )
            for i in range(50)
        ]
        results = await asyncio.gather(*clicks, return_exceptions=True)

        winners = [r for r in results if not isinstance(r, BaseException)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(r, AlreadyDecidedError) for r in losers), losers[:3]
        winner = winners[0].approval
        assert winner.status is ApprovalStatus.SUCCEEDED
        assert {r.decided_by for r in losers} <= {winner.decided_by}  # type: ignore[union-attr]
        assert isinstance(winners[0].result, Answer)

        [change] = await closes(agent_env)
        assert change.subject == "alice"  # the requester's token, not the approver's
        pending = await first.log.query(AuditQuery(kinds=(EventKind.WRITE_PENDING,)))
        outcomes = await first.log.query(AuditQuery(kinds=(EventKind.WRITE_OUTCOME,)))
        assert [e.idempotency_key for e in pending] == [change.idempotency_key]
        assert [(e.idempotency_key, e.outcome) for e in outcomes] == [
            (change.idempotency_key, "success")
        ]


async def test_resuming_from_the_interrupt_checkpoint_does_not_write_twice(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    users = await link_all(agent_env)
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        approval_id, interrupt = await request_close(one, users["alice"])
        graph = one.agent.graphs.graph(one.agent.graphs.names())
        config = {"configurable": {"thread_id": interrupt.thread_id}}
        at_interrupt = (await graph.aget_state(config)).config  # the interrupt's checkpoint

        await one.service.decide(users["bob"], approval_id, APPROVE)
        assert len(await closes(agent_env)) == 1

        # A second click or a retried request: refused by the claim, nothing resumes.
        with pytest.raises(AlreadyDecidedError):
            await one.service.decide(users["carol"], approval_id, APPROVE)
        # The LangGraph trap: resuming from the interrupt's own checkpoint forks the thread
        # and runs the tool again. The write carries the approval's idempotency key, so the
        # server applies it once.
        sessions_ctx = await _replay_context(
            one.agent, users["alice"], interrupt.thread_id, approval_id
        )
        async with sessions_ctx as ctx:
            await graph.ainvoke(
                Command(resume={"decisions": [{"type": "approve"}]}), at_interrupt, context=ctx
            )
        pending = await one.log.query(AuditQuery(kinds=(EventKind.WRITE_PENDING,)))
        assert len(pending) == 2  # the tool really ran twice ...
        assert len({e.idempotency_key for e in pending}) == 1  # ... with one key
        assert len(await closes(agent_env)) == 1  # ... and the server wrote once


async def _replay_context(agent: Agent, who: Identity, thread_id: str, approval_id: str) -> Any:
    """A run context like ``Agent.resume`` builds (fresh requester sessions)."""
    from agent_core.binding import RunContext
    from agent_core.sessions import RunSessions

    @contextlib.asynccontextmanager
    async def ctx() -> AsyncIterator[RunContext]:
        sessions = RunSessions(
            agent._servers,
            agent._broker,
            who,
            health=agent.health,
            cache=agent.cache,
            stats=agent.stats,
        )
        try:
            definitions = {
                d.prefixed_name: d
                for s in agent._servers
                for d in (agent.cache.get(s).tools if agent.cache.get(s) else ())
            }
            yield RunContext(
                identity=who,
                thread_id=thread_id,
                sessions=sessions,
                policy=agent.policy,
                definitions=definitions,
                approval_id=approval_id,
                observer=agent._observer,
            )
        finally:
            await sessions.aclose()

    return ctx()


async def test_refusals_and_the_sweeper_answer_the_requester(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    users = await link_all(agent_env)
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        approval_id, _ = await request_close(one, users["alice"])
        with pytest.raises(NotAuthorisedError, match="ticket-leads"):
            await one.service.decide(users["dave"], approval_id, APPROVE)  # outsider
        with pytest.raises(NotAuthorisedError, match="ticket-leads"):
            await one.service.decide(users["alice"], approval_id, APPROVE)  # requester
        later = utc_now() + timedelta(hours=1)
        [report] = await one.service.sweep(now=later)
        assert report.approval.status is ApprovalStatus.EXPIRED
        assert isinstance(report.result, Answer)  # the requester's thread got an answer
        assert await closes(agent_env) == []


async def test_self_approval_of_a_sensitive_tool_is_refused_end_to_end(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    users = await link_all(agent_env)
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        threads = SqlThreadStore(one.engine)
        bob = users["bob"]
        thread = await threads.get_or_create(PlatformRef("slack", "T-TEST", "C1", "17.9"), "bob")
        result = await one.agent.run(bob, thread.thread_id, "Close PAY-104, the alert is fixed")
        assert isinstance(result, Interrupt)
        approval = await one.service.open(result, bob)
        with pytest.raises(NotAuthorisedError, match="your own request"):
            await one.service.decide(bob, approval.approval_id, APPROVE)
        assert await closes(agent_env) == []


async def test_revoked_requester_writes_nothing_and_the_approval_fails(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    users = await link_all(agent_env)
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        approval_id, _ = await request_close(one, users["alice"])
        agent_env.idp.provider.revoke_user("alice")
        report = await one.service.decide(users["bob"], approval_id, APPROVE)
        assert report.approval.status is ApprovalStatus.FAILED
        assert "access to ticketing was refused" in report.approval.outcome["reason"]
        assert await closes(agent_env) == []


async def test_crash_between_write_and_outcome_is_reconciled_and_a_retry_adds_nothing(
    agent_env: AgentEnv, sqlite_url: str
) -> None:
    users = await link_all(agent_env)
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        approval_id, _ = await request_close(one, users["alice"])
        real_finished = AuditObserver.tool_call_finished
        write_done = asyncio.Event()

        async def hang(self: AuditObserver, *args: Any, **kwargs: Any) -> None:
            write_done.set()  # the write reached the server; the process "dies" right here
            await asyncio.Event().wait()

        AuditObserver.tool_call_finished = hang  # type: ignore[method-assign]
        try:
            decision = asyncio.create_task(one.service.decide(users["bob"], approval_id, APPROVE))
            await asyncio.wait_for(write_done.wait(), timeout=30)
            decision.cancel()  # killed: no outcome record, the approval never finished
            with pytest.raises(asyncio.CancelledError):
                await decision
        finally:
            AuditObserver.tool_call_finished = real_finished  # type: ignore[method-assign]
        assert len(await closes(agent_env)) == 1
        [pending] = await one.log.unresolved_writes()
        stuck = await one.service.store.get(approval_id)
        assert stuck is not None
        assert stuck.status is ApprovalStatus.EXECUTING  # the crash hit it mid-write

        async def token_for(subject: str, server: str) -> str:
            return (await agent_env.harness.broker.get_token(users[subject], server)).value

        urls = {s.name: s.url for s in agent_env.servers}
        reconciler = Reconciler(
            one.log,
            McpChangeLog(urls, token_for),
            clock=lambda: utc_now() + timedelta(minutes=5),
        )
        report = await reconciler.run()
        assert [(e.event_id, outcome) for e, outcome in report.resolved] == [
            (pending.event_id, "success")
        ]
        assert report.ambiguous == []
        assert await one.log.unresolved_writes() == []

        [retried] = await one.service.finish_interrupted(grace=timedelta(0))
        # The thread had already moved past the interrupt; the reconciled audit trail shows
        # the write happened, so the approval ends approved — and nothing is written again.
        assert retried.approval.status is ApprovalStatus.SUCCEEDED
        assert len(await closes(agent_env)) == 1


@pytest.mark.postgres
async def test_an_edit_decided_on_another_instance_runs_the_edited_arguments(
    agent_env: AgentEnv, postgres_url: str, checkpoint_url: str
) -> None:
    users = await link_all(agent_env)
    model = close_model()
    async with (
        instance(agent_env, postgres_url, users, model, checkpoint_url) as first,
        instance(agent_env, postgres_url, users, model, checkpoint_url) as second,
    ):
        approval_id, _ = await request_close(first, users["alice"])
        # The second instance has not discovered any tools: the schema stored with the
        # approval still lets it check the edit.
        with pytest.raises(InvalidEditError) as refused:
            await second.service.decide(
                users["bob"], approval_id, ActionDecision("edit", args={"key": "PAY-104"})
            )
        assert "resolution" in refused.value.field_errors
        edited = ActionDecision("edit", args={"key": "PAY-104", "resolution": "Duplicate"})
        report = await second.service.decide(users["bob"], approval_id, edited)
        assert report.approval.status is ApprovalStatus.SUCCEEDED
        [change] = await closes(agent_env)
        assert change.subject == "alice"
        assert "Duplicate" in json.dumps(change.change)
        [decision] = await second.log.query(AuditQuery(kinds=(EventKind.DECISION,)))
        assert decision.args_summary == {"key": "PAY-104", "resolution": "Alert fixed"}
        assert decision.edited_args_summary == {"key": "PAY-104", "resolution": "Duplicate"}


async def test_a_decision_mints_one_fresh_token_and_its_call_carries_that_one(
    agent_env: AgentEnv, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = await link_all(agent_env)
    alice, broker = users["alice"], agent_env.harness.broker
    async with instance(agent_env, sqlite_url, users, close_model()) as one:
        approval_id, _ = await request_close(one, alice)
        handed: list[str] = []  # every token the broker hands out from here on
        others: list[str] = []  # minted for another decision of alice's meanwhile
        real_get_token, real_execute = broker.get_token, one.agent.execute

        async def get_token(identity: Identity, server: str) -> Any:
            token = await real_get_token(identity, server)
            handed.append(token.value)
            return token

        async def execute(*args: Any, **kwargs: Any) -> Any:
            # Between this decision's check and its call, another click on one of alice's
            # cards mints her next fresh token (its own check).
            await broker.invalidate(alice, "ticketing")
            others.append((await real_get_token(alice, "ticketing")).value)
            return await real_execute(*args, **kwargs)

        sent: list[str] = []  # the Authorization header of each tools/call, at the wire
        real_send = httpx.AsyncClient.send

        async def send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> Any:
            if b'"tools/call"' in request.content:
                sent.append(request.headers.get("authorization", ""))
            return await real_send(self, request, **kw)

        monkeypatch.setattr(broker, "get_token", get_token)
        monkeypatch.setattr(one.agent, "execute", execute)
        monkeypatch.setattr(httpx.AsyncClient, "send", send)
        exchanges = broker.metrics.exchanges
        report = await one.service.decide(users["bob"], approval_id, APPROVE)
        assert report.approval.status is ApprovalStatus.SUCCEEDED
        # The decision's one fresh token (its check) and the other decision's: no third.
        assert broker.metrics.exchanges - exchanges == 2
        assert handed[0] not in others
        # The write went out with the token minted for this decision, asked for once.
        assert sent[0] == f"Bearer {handed[0]}"
        assert handed.count(handed[0]) == 1
        assert len(await closes(agent_env)) == 1
