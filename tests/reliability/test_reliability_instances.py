"""Two app instances on one PostgreSQL: a request accepted by A is approved on B; and the
database restarted between the interrupt and the approval (on a throwaway cluster of our own,
never the shared server)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core import Agent, Answer, Interrupt
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import PlatformRef, SqlThreadStore
from approvals import ActionDecision, ApprovalStatus, SqlApprovalStore
from approvals.service import ApprovalService
from audit import AuditLog, AuditObserver, AuditQuery, EventKind, SqlAuditSink
from broker import Identity
from infra.storage import create_engine, migrate
from testing.agent import AgentEnv, FunctionChatModel, call, final, tool_results
from tests.reliability.pg_cluster import PgCluster, throwaway_cluster

APPROVE = ActionDecision("approve")
BOUND = 60.0


def close_model() -> FunctionChatModel:
    """Stateless, like a real model: the next step follows from the thread's messages, so
    an instance that never saw the thread before continues it correctly."""

    def step(messages: list[BaseMessage]) -> Any:
        done = [m.name for m in tool_results(messages)]
        if "ticketing_close_ticket" in done:
            return final(str(tool_results(messages)[-1].content))
        if "ticketing_get_ticket" in done:
            return call("ticketing_close_ticket", key="PAY-104", resolution="Alert fixed")
        return call("ticketing_get_ticket", key="PAY-104")

    return FunctionChatModel(fn=step)


@dataclass
class Instance:
    engine: AsyncEngine
    agent: Agent
    service: ApprovalService
    log: AuditLog


@contextlib.asynccontextmanager
async def instance(env: AgentEnv, url: str, users: dict[str, Identity]) -> AsyncIterator[Instance]:
    """One app instance: its own engine, checkpointer pool, agent (own model) and approvals."""
    engine = create_engine(url)
    try:
        async with open_checkpointer(url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            agent = env.agent(close_model(), threads=SqlThreadStore(engine), checkpointer=saver)
            agent._observer = AuditObserver(log)

            async def lookup(subject: str) -> Identity:
                return users[subject]

            service = ApprovalService(
                SqlApprovalStore(engine), log, agent, agent, lookup, env.harness.broker
            )
            yield Instance(engine, agent, service, log)
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with throwaway_cluster() as running:
        yield running


async def _database(cluster: PgCluster, name: str) -> str:
    url = await asyncio.to_thread(cluster.create_database, name)
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    return url


async def closes(env: AgentEnv) -> list[Any]:
    return [
        c
        for c in await env.servers.tickets.all_changes()
        if c.ticket_key == "PAY-104" and c.tool == "close_ticket"
    ]


async def request_on(one: Instance, alice: Identity, ts: str) -> str:
    threads = SqlThreadStore(one.engine)
    thread = await threads.get_or_create(PlatformRef("slack", "T1", "C1", ts), "alice")
    result = await one.agent.run(alice, thread.thread_id, "Close PAY-104, the alert is fixed")
    assert isinstance(result, Interrupt)
    return (await one.service.open(result, alice)).approval_id


async def _scenario(env: AgentEnv, url: str, restart: PgCluster | None) -> None:
    users = {n: await env.user(n) for n in ("alice", "bob")}
    async with instance(env, url, users) as a, instance(env, url, users) as b:
        approval_id = await asyncio.wait_for(request_on(a, users["alice"], "1.1"), BOUND)
        assert await closes(env) == []
        if restart is not None:
            await asyncio.to_thread(restart.restart)  # every pooled connection is now dead
        report = await asyncio.wait_for(b.service.decide(users["bob"], approval_id, APPROVE), BOUND)

        assert report.approval.status is ApprovalStatus.SUCCEEDED
        assert isinstance(report.result, Answer), report.result
        [change] = await closes(env)
        assert change.subject == "alice"  # resumed with the requester's fresh token
        outcomes = await b.log.query(AuditQuery(kinds=(EventKind.WRITE_OUTCOME,)))
        assert [e.outcome for e in outcomes] == ["success"]
        # A's agent never saw the decision, yet the thread it started is finished.
        assert await a.agent.pending(users["alice"], report.approval.thread_id) is None


@pytest.mark.postgres
async def test_request_on_instance_a_is_approved_on_instance_b(
    agent_env: AgentEnv, cluster: PgCluster
) -> None:
    url = await _database(cluster, "two_instances")
    await _scenario(agent_env, url, restart=None)


@pytest.mark.postgres
async def test_postgres_restarted_between_interrupt_and_approval_resume_works(
    agent_env: AgentEnv, cluster: PgCluster
) -> None:
    url = await _database(cluster, "restart")
    await _scenario(agent_env, url, restart=cluster)
