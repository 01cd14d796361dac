"""Invariant 14: what a finished run tells people (its answer, caveats and actions taken)
never carries text written for the model, whichever way a write or a read ended."""

from __future__ import annotations

from agent_core import Answer
from agent_core.texts import model_directed
from testing.agent import AgentEnv, ScriptedChatModel, call, final, new_thread


def assert_only_peoples_words(result: Answer) -> None:
    """Nothing people are shown of ``result`` (answer, caveats, actions taken) is text
    written for the model (also used by the rejection and revoked-access tests in
    test_hitl_e2e.py and test_failures_e2e.py)."""
    shown = [result.answer, *result.caveats, *result.actions_taken]
    assert [t for t in shown if model_directed(t)] == []


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
    assert_only_peoples_words(result)
