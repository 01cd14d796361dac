"""Credentials never enter graph state: after reads, writes and every kind of decision, no
token the broker minted appears anywhere in the checkpoint tables (SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from langchain_core.messages import BaseMessage

from agent_core import Answer, Interrupt
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import PlatformRef, SqlThreadStore
from broker import AccessToken, Broker, Identity
from infra.storage import create_engine
from testing.agent import AgentEnv, ScriptedChatModel, call, final, tool_results


@dataclass
class RecordingBroker:
    inner: Broker
    minted: list[str] = field(default_factory=list)

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        token = await self.inner.get_token(identity, server)
        self.minted.append(token.value)
        return token

    async def invalidate(self, identity: Identity, server: str) -> None:
        await self.inner.invalidate(identity, server)


def echo(messages: list[BaseMessage]) -> BaseMessage:
    results = tool_results(messages)
    return final(str(results[-1].content)[:200] if results else "none")


async def test_no_token_in_checkpoint_tables(agent_env: AgentEnv, database_url: str) -> None:
    broker = RecordingBroker(agent_env.harness.broker)
    engine = create_engine(database_url)
    try:
        async with open_checkpointer(database_url) as saver:
            flows = {
                "read": [call("ticketing_get_ticket", key="PAY-101"), echo],
                "approve": [call("ticketing_add_comment", key="PAY-101", body="a"), echo],
                "edit": [call("ticketing_add_comment", key="PAY-101", body="b"), echo],
                "reject": [call("ticketing_close_ticket", key="PAY-104", resolution="x"), echo],
                "docs": [call("docs_search_docs", query="refund"), echo],
            }
            model = ScriptedChatModel(steps=[])
            threads = SqlThreadStore(engine)
            agent = agent_env.agent(model, threads=threads, checkpointer=saver, broker=broker)
            alice = await agent_env.user("alice")
            for name, steps in flows.items():
                model.steps = steps
                model.counters.clear()
                thread = await threads.get_or_create(
                    PlatformRef("slack", "T", "C", name), alice.subject
                )
                result = await agent.run(alice, thread.thread_id, f"do {name}")
                if isinstance(result, Interrupt):
                    decision = {
                        "approve": {"type": "approve"},
                        "edit": {
                            "type": "edit",
                            "edited_action": {
                                "name": "ticketing_add_comment",
                                "args": {"key": "PAY-101", "body": "edited"},
                            },
                        },
                        "reject": {"type": "reject", "message": "no"},
                    }[name]
                    result = await agent.resume(alice, thread.thread_id, [decision])
                assert isinstance(result, Answer)
        assert broker.minted, "the flows minted no tokens: the scan would prove nothing"

        dump = await _dump_checkpoint_tables(engine)
        assert b"PAY-101" in dump  # the scan does see thread content
        for token in set(broker.minted):
            assert token.encode() not in dump
            assert token.split(".")[2].encode() not in dump  # not even the signature part
        assert b"Bearer " not in dump
    finally:
        await engine.dispose()


async def _dump_checkpoint_tables(engine: sa.ext.asyncio.AsyncEngine) -> bytes:
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
        chunks: list[bytes] = []
        checkpoint_tables = [n for n in names if "checkpoint" in n or n == "writes"]
        assert checkpoint_tables, names
        for name in checkpoint_tables:
            rows = (await conn.execute(sa.text(f'SELECT * FROM "{name}"'))).all()
            for row in rows:
                for value in row:
                    if isinstance(value, bytes | bytearray | memoryview):
                        chunks.append(bytes(value))
                    elif value is not None:
                        chunks.append(str(value).encode())
    return b"\n".join(chunks)
