"""The ``before_model`` hooks run inside the model node (``agent_core.fold``): no node of
their own, what they change saved with the model's response and in order, a jump to the end
still ending the run before the model is called."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from agent_core import Answer
from testing.agent import AgentEnv, FunctionChatModel, final, new_thread
from testing.turns import reads_then_answer


async def test_the_graph_has_no_before_model_node(agent_env: AgentEnv) -> None:
    agent = agent_env.agent(FunctionChatModel(fn=reads_then_answer(1)))
    alice = await agent_env.user("alice")
    assert (await agent.run(alice, await new_thread(agent, alice), "show PAY-101")).kind == (
        "answer"
    )
    graph = agent.graphs.graph(agent.graphs.names())
    assert not [n for n in graph.nodes if n.endswith(".before_model")], list(graph.nodes)
    assert [n for n in graph.nodes if n.endswith(".after_model")] == ["opsbot.after_model"]


async def test_a_summary_is_saved_before_the_answer_it_led_to(agent_env: AgentEnv) -> None:
    """Summarisation rewrites the whole list before the model call; the saved thread is that
    list, then the model's response (not the response first, nor the old turns kept)."""

    def step(messages: list[BaseMessage]) -> AIMessage:
        # The agent's calls open with its system prompt; the summariser's is one request.
        if isinstance(messages[0], SystemMessage):
            return final("ok")
        return AIMessage(content="SUMMARY-OF-EARLIER-TURNS")

    agent = agent_env.agent(
        FunctionChatModel(fn=step), summarize_trigger_tokens=300, summarize_keep_messages=2
    )
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    filler = "lorem ipsum dolor sit amet " * 60
    for i in range(3):
        assert isinstance(await agent.run(alice, thread, f"turn {i}: {filler}"), Answer)

    state = await agent.graphs.graph(agent.graphs.names()).aget_state(agent._config(thread))
    messages = state.values["messages"]
    texts = [str(m.content) for m in messages]
    summary = next(i for i, t in enumerate(texts) if "SUMMARY-OF-EARLIER-TURNS" in t)
    last_question = max(
        i for i, m in enumerate(messages) if isinstance(m, HumanMessage) and "turn 2" in m.text
    )
    answers = [i for i, m in enumerate(messages) if isinstance(m, AIMessage) and m.tool_calls]
    assert summary < last_question < answers[-1], texts
    assert not any("turn 0" in t for t in texts)
    assert len({m.id for m in messages}) == len(messages)  # nothing saved twice


async def test_a_call_limit_reached_before_the_model_ends_the_run_without_calling_it(
    agent_env: AgentEnv,
) -> None:
    model = FunctionChatModel(fn=lambda _m: final("ok"))
    agent = agent_env.agent(model, thread_model_call_limit=1)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "one"), Answer)
    seen = len(model.seen)

    second = await agent.run(alice, thread, "two")

    assert isinstance(second, Answer)
    assert any("call limit" in c for c in second.caveats)
    assert len(model.seen) == seen  # the model was not called again
    state = await agent.graphs.graph(agent.graphs.names()).aget_state(agent._config(thread))
    assert not state.next  # the run ended
    last = state.values["messages"][-1]
    assert isinstance(last, AIMessage)
    assert "limit" in str(last.content).lower()
