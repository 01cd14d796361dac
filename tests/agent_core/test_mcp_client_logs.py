"""A run's MCP sessions leave no per-call INFO lines from the MCP client (session ids,
protocol versions): they are DEBUG lines, shown only when DEBUG is on."""

from __future__ import annotations

import logging

import pytest

from agent_core import Answer
from testing.agent import AgentEnv, ScriptedChatModel, call, final, new_thread


async def _ask(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[call("ticketing_get_ticket", key="PAY-101"), final("PAY-101 is open")]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    assert isinstance(result, Answer)


def _mcp_client(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [r for r in records if r.name.startswith("mcp.client")]


async def test_mcp_client_session_lines_are_debug_not_info(
    agent_env: AgentEnv, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        await _ask(agent_env)
    assert _mcp_client(caplog.records) == []
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        await _ask(agent_env)
    seen = _mcp_client(caplog.records)
    assert any("session ID" in r.getMessage() for r in seen)  # the client did say it
    assert {r.levelname for r in seen} == {"DEBUG"}
