"""Middleware each on its own: summarization, tool selection, model fallback (and the model
recorded per run), the bulk-write flag, and structured-answer verification."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import Field

from agent_core import Answer, FinalAnswer, Interrupt, Source
from agent_core.grounding import collect_ids, verify_sources
from testing.agent import (
    AgentEnv,
    FailingChatModel,
    FunctionChatModel,
    ScriptedChatModel,
    call,
    calls,
    final,
    new_thread,
)


def test_collect_ids_finds_id_like_values_only() -> None:
    data = {
        "tickets": [{"key": "PAY-1", "title": "PAY-2 mentioned"}, {"key": "PAY-3"}],
        "doc_id": "runbook-x",
        "nested": '{"order_id": "ORD-1"}',
        "count": 3,
    }
    assert collect_ids(data) == {"PAY-1", "PAY-3", "runbook-x", "ORD-1"}


def test_verify_sources_drops_unseen_and_duplicate_sources() -> None:
    draft = FinalAnswer(
        answer="a",
        sources=[
            Source(system="ticketing", id="PAY-1"),
            Source(system="ticketing", id="PAY-1"),
            Source(system="docs", id="PAY-1"),  # right id, wrong system
            Source(system="ticketing", id="PAY-404"),
        ],
        confidence="high",
    )
    answer = verify_sources(draft, {"ticketing": {"PAY-1"}}, model_used="m")
    assert [(s.system, s.id) for s in answer.sources] == [("ticketing", "PAY-1")]
    assert "docs:PAY-1" in answer.caveats[0]
    assert "ticketing:PAY-404" in answer.caveats[0]
    assert answer.confidence == "low"
    assert answer.model_used == "m"


async def test_invalid_structured_answer_gives_a_safe_fallback(agent_env: AgentEnv) -> None:
    bad = calls(("FinalAnswer", {"answer": 42, "confidence": "certainly"}))
    model = ScriptedChatModel(steps=[bad])
    agent = agent_env.agent(model, run_model_call_limit=3)
    alice = await agent_env.user("alice")
    result = await agent.run(alice, await new_thread(agent, alice), "hi")
    assert isinstance(result, Answer)
    assert result.confidence == "low"
    assert result.sources == []
    assert result.caveats


async def test_fallback_model_serves_and_is_recorded(agent_env: AgentEnv) -> None:
    backup = ScriptedChatModel(model_name="backup-model", steps=[final("from backup")])
    agent = agent_env.agent(FailingChatModel(model_name="primary"))
    agent = type(agent)(
        agent.config,
        model=FailingChatModel(model_name="primary"),
        fallbacks=[backup],
        broker=agent_env.harness.broker,
        threads=agent.threads,
        checkpointer=agent.checkpointer,
        policy=agent.policy,
    )
    alice = await agent_env.user("alice")
    result = await agent.run(alice, await new_thread(agent, alice), "hi")
    assert isinstance(result, Answer)
    assert result.answer == "from backup"
    assert result.model_used == "backup-model"


async def test_bulk_write_proposals_are_flagged_for_the_approver(agent_env: AgentEnv) -> None:
    three = calls(
        *[
            ("ticketing_close_ticket", {"key": k, "resolution": "all"})
            for k in ("PAY-101", "PAY-102", "PAY-104")
        ]
    )
    two = calls(
        *[("ticketing_add_comment", {"key": k, "body": "x"}) for k in ("PAY-101", "PAY-102")]
    )
    alice = await agent_env.user("alice")
    agent = agent_env.agent(ScriptedChatModel(steps=[three]))
    bulk = await agent.run(alice, await new_thread(agent, alice), "close them all")
    agent = agent_env.agent(ScriptedChatModel(steps=[two]))
    small = await agent.run(alice, await new_thread(agent, alice), "comment twice")

    assert isinstance(bulk, Interrupt)
    assert bulk.bulk_write
    assert bulk.bulk_reason == "3 write calls proposed in one step"
    assert isinstance(small, Interrupt)
    assert not small.bulk_write


async def test_summarization_kicks_in_above_the_token_trigger(agent_env: AgentEnv) -> None:
    summaries: list[int] = []

    def summarize(messages: list[BaseMessage]) -> AIMessage:
        summaries.append(len(messages))
        return AIMessage(content="SUMMARY-OF-EARLIER-TURNS")

    model = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(model)
    agent = type(agent)(
        _with(agent.config, summarize_trigger_tokens=300, summarize_keep_messages=2),
        model=model,
        summary_model=FunctionChatModel(fn=summarize),
        broker=agent_env.harness.broker,
        threads=agent.threads,
        checkpointer=agent.checkpointer,
        policy=agent.policy,
    )
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    filler = "lorem ipsum dolor sit amet " * 60
    for i in range(3):
        await agent.run(alice, thread, f"turn {i}: {filler}")

    assert summaries, "the summary model was never called"
    last_seen = model.seen[-1]
    assert any("SUMMARY-OF-EARLIER-TURNS" in str(m.content) for m in last_seen)
    humans = [m for m in last_seen if isinstance(m, HumanMessage) and "turn 0" in m.text]
    assert humans == []  # the oldest turn was summarised away


def _with(config: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(config, **changes)


class SelectorModel(FunctionChatModel):
    picked: list[str] = Field(default_factory=list)

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Runnable[Any, Any]:
        return RunnableLambda(lambda _messages: {"tools": list(self.picked)})


async def test_tool_selector_narrows_tools_above_the_threshold(agent_env: AgentEnv) -> None:
    selector = SelectorModel(fn=lambda _m: AIMessage(content=""))
    selector.picked = ["ticketing_get_ticket", "docs_search_docs"]
    model = ScriptedChatModel(steps=[final("ok")])
    alice = await agent_env.user("alice")

    agent = agent_env.agent(model, tool_selector_threshold=5, tool_selector_max_tools=2)
    agent = type(agent)(
        agent.config,
        model=model,
        selector_model=selector,
        broker=agent_env.harness.broker,
        threads=agent.threads,
        checkpointer=agent.checkpointer,
        policy=agent.policy,
    )
    await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    assert set(model.bound_tools[-1]) == {"ticketing_get_ticket", "docs_search_docs", "FinalAnswer"}

    below = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(below, tool_selector_threshold=50)
    await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    assert len(below.bound_tools[-1]) > 3


async def test_system_prompt_guides_but_enforces_nothing(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(steps=[call("ticketing_get_ticket", key="PAY-101"), final("ok")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    system = model.seen[0][0]
    assert isinstance(system, SystemMessage)
    for phrase in ("ticketing:", "docs:", "database:", "data, never", "sources", "approver"):
        assert phrase in system.text, phrase
