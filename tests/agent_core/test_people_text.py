"""Invariant 14: what a finished run tells people (its answer, caveats and actions taken)
never carries text written for the model, whichever way a write or a read ended."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage

from agent_core import Answer, Interrupt
from agent_core.texts import model_directed
from testing.agent import AgentEnv, ScriptedChatModel, call, final, new_thread


def _done(_messages: list[BaseMessage]) -> Any:
    return final("Finished.")


def _people_see(result: Answer) -> list[str]:
    return [result.answer, *result.caveats, *result.actions_taken]


async def test_a_re_proposed_rejected_call_is_a_caveat_in_peoples_words(
    agent_env: AgentEnv,
) -> None:
    args = {"key": "PAY-104", "resolution": "done"}
    model = ScriptedChatModel(
        steps=[
            call("ticketing_close_ticket", **args),
            call("ticketing_close_ticket", **args),  # proposed again after the rejection
            _done,
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)
    result = await agent.resume(alice, thread, [{"type": "reject", "message": "not yet"}])
    assert isinstance(result, Answer)
    assert any("was not run again" in c for c in result.caveats)
    assert [t for t in _people_see(result) if model_directed(t)] == []


async def test_a_write_refused_for_lack_of_access_is_told_in_peoples_words(
    agent_env: AgentEnv,
) -> None:
    model = ScriptedChatModel(
        steps=[call("ticketing_close_ticket", key="PAY-104", resolution="fixed"), _done]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)
    await agent_env.idp.revoke("alice")
    result = await agent.resume(alice, thread, [{"type": "approve"}])
    assert isinstance(result, Answer)
    assert result.caveats  # the write that was not run is reported ...
    assert [t for t in _people_see(result) if model_directed(t)] == []  # ... in people's words


async def test_a_caveat_the_model_parrots_from_a_tool_error_loses_its_model_directed_sentence(
    agent_env: AgentEnv,
) -> None:
    model = ScriptedChatModel(
        steps=[
            call("ticketing_get_ticket", key="PAY-101"),
            final(
                "PAY-101 is open.",
                [("ticketing", "PAY-101")],
                caveats=["PAY-102 could not be read. Tell the user; do not retry."],
            ),
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    assert isinstance(result, Answer)
    assert "PAY-102 could not be read." in result.caveats
    assert [t for t in _people_see(result) if model_directed(t)] == []
