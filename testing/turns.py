"""An agent as production wires it (SQL threads, checkpointer and audit log), for the turn
bench and the tests that count what one turn costs.

Example::

    async with open_sql_agent(env, model, "sqlite:///tmp/opsbot.db") as agent:
        result = await agent.run(alice, thread_id, "show PAY-101")
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent_core import Agent, AgentConfig, ToolPolicy
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import SqlThreadStore
from audit import AuditLog, AuditObserver, SqlAuditSink
from infra.storage import create_engine, migrate
from testing.agent import AgentEnv, call, final, tool_results

READ_KEYS = ("PAY-101", "PAY-102", "PAY-103", "PAY-104")


def reads_then_answer(k: int) -> Any:
    """A scripted model's step: ``k`` ``ticketing_get_ticket`` calls, one per step, then the
    structured answer citing the first ticket."""

    def step(messages: list[BaseMessage]) -> AIMessage:
        done = len(tool_results(messages))
        if done < k:
            return call("ticketing_get_ticket", key=READ_KEYS[done % len(READ_KEYS)])
        return final("done", [("ticketing", READ_KEYS[0])])

    return step


@contextlib.asynccontextmanager
async def open_sql_agent(
    env: AgentEnv,
    model: BaseChatModel,
    url: str,
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    migrated: bool = False,
    servers: Sequence[str] | None = None,
) -> AsyncIterator[Agent]:
    """An agent on ``env``'s servers whose threads, checkpoints and audit records live in
    the database at ``url`` (migrated here unless ``migrated``)."""
    engine = create_engine(url)
    try:
        if not migrated:
            await migrate(engine)
        async with contextlib.AsyncExitStack() as stack:
            saver = checkpointer
            if saver is None:
                saver = await stack.enter_async_context(open_checkpointer(url))
            configs = tuple(c for c in env.server_configs if servers is None or c.name in servers)
            agent = Agent(
                AgentConfig(servers=configs, retry_initial_delay=0.0),
                model=model,
                broker=env.harness.broker,
                threads=SqlThreadStore(engine),
                checkpointer=saver,
                policy=ToolPolicy.load(),
                observer=AuditObserver(AuditLog(SqlAuditSink(engine))),
            )
            try:
                yield agent
            finally:
                await agent.settle()
    finally:
        await engine.dispose()
