"""Reads, writes and human review end to end: dev IdP, reference servers, scripted models.

Covers the known upstream HITL bugs: an edit that changes the tool (langchain#40166), the model
re-issuing the original call after an edit (#33787), reject loops (deepagents#2946) and mixed
approve/reject batches (langchainjs#11125).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.types import Command

from agent_core import Answer, Interrupt, InvalidDecisionError, NoPendingApprovalError
from agent_core.threads import NotThreadOwnerError
from testing.agent import (
    AgentEnv,
    ScriptedChatModel,
    call,
    calls,
    final,
    new_thread,
    tool_results,
)
from tests.agent_core.test_people_text import assert_only_peoples_words


async def ticket(env: AgentEnv, key: str) -> Any:
    return next(t for t in await env.servers.tickets.all_tickets() if t.key == key)


async def changes_for(env: AgentEnv, key: str) -> list[Any]:
    return [c for c in await env.servers.tickets.all_changes() if c.ticket_key == key]


def echo_last_tool(messages: list[BaseMessage]) -> Any:
    """Final answer quoting the last tool result (so tests can see what the model saw)."""
    results = tool_results(messages)
    text = str(results[-1].content) if results else "no tool result"
    return final(text)


async def test_read_answer_cites_only_ids_from_tool_results(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[
            call("ticketing_search_tickets", query="refunds"),
            final("PAY-101 is stuck.", [("ticketing", "PAY-101"), ("ticketing", "PAY-999")]),
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    result = await agent.run(alice, thread, "Which refund tickets are open?")

    assert isinstance(result, Answer)
    assert [(s.system, s.id) for s in result.sources] == [("ticketing", "PAY-101")]
    assert any("PAY-999" in c for c in result.caveats)
    assert result.model_used == "scripted"


async def test_write_raises_interrupt_and_approve_runs_it_once(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[
            call("ticketing_get_ticket", key="PAY-104"),
            call("ticketing_close_ticket", key="PAY-104", resolution="Alert fixed"),
            echo_last_tool,
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    result = await agent.run(alice, thread, "Close PAY-104, the alert is fixed")

    assert isinstance(result, Interrupt)
    (action,) = result.action_requests
    assert action.name == "ticketing_close_ticket"
    assert action.server == "ticketing"
    assert action.args == {"key": "PAY-104", "resolution": "Alert fixed"}
    assert [r.tool for r in result.reads] == ["ticketing_get_ticket"]
    assert "PAY-104" in result.reads[0].ids
    assert result.review_configs[0].allowed_decisions == ["approve", "edit", "reject"]
    assert (await ticket(agent_env, "PAY-104")).status != "closed"  # nothing ran yet

    done = await agent.resume(alice, thread, [{"type": "approve"}], approval_id="apr-1")

    assert isinstance(done, Answer)
    assert (await ticket(agent_env, "PAY-104")).status == "closed"
    (change,) = await changes_for(agent_env, "PAY-104")
    assert change.subject == "alice"
    assert change.idempotency_key
    assert change.idempotency_key.startswith("opsbot-")
    # A second resume finds nothing pending: it cannot run the write again.
    with pytest.raises(NoPendingApprovalError):
        await agent.resume(alice, thread, [{"type": "approve"}])
    assert len(await changes_for(agent_env, "PAY-104")) == 1


async def test_edit_runs_edited_args_and_original_call_is_not_reissued(
    agent_env: AgentEnv,
) -> None:
    original = {"key": "PAY-104", "body": "closing this now"}
    model = ScriptedChatModel(
        steps=[
            call("ticketing_add_comment", **original),
            # langchain#33787: after the edit the model proposes its original call again.
            call("ticketing_add_comment", **original),
            echo_last_tool,
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "comment on PAY-104"), Interrupt)

    edited = {"key": "PAY-104", "body": "Investigating the alert"}
    result = await agent.resume(
        alice,
        thread,
        [{"type": "edit", "edited_action": {"name": "ticketing_add_comment", "args": edited}}],
    )

    assert isinstance(result, Answer)  # no second review of the original call
    comments = [c.body for c in (await ticket(agent_env, "PAY-104")).comments]
    assert "Investigating the alert" in comments
    assert "closing this now" not in comments
    assert len(await changes_for(agent_env, "PAY-104")) == 1
    assert "already replaced" in result.answer


async def test_edit_that_changes_the_tool_is_refused(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[call("ticketing_add_comment", key="PAY-104", body="hi"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "comment on PAY-104"), Interrupt)

    swap = {
        "type": "edit",
        "edited_action": {
            "name": "ticketing_close_ticket",
            "args": {"key": "PAY-104", "resolution": "closed by edit"},
        },
    }
    with pytest.raises(InvalidDecisionError) as refused:
        await agent.resume(alice, thread, [swap])
    assert "name" in refused.value.field_errors
    assert (await ticket(agent_env, "PAY-104")).status != "closed"
    assert await agent.pending(alice, thread) is not None  # still waiting, nothing lost

    # Second layer: a decision that bypasses Agent.resume's check still cannot switch tools.
    graph = agent.graphs.graph(agent.graphs.names())
    sessions_ctx = await _context(agent, alice, thread)
    await graph.ainvoke(
        Command(resume={"decisions": [swap]}),
        {"configurable": {"thread_id": thread}},
        context=sessions_ctx,
    )
    await sessions_ctx.sessions.aclose()
    assert (await ticket(agent_env, "PAY-104")).status != "closed"
    assert await changes_for(agent_env, "PAY-104") == []


async def _context(agent: Any, identity: Any, thread: str) -> Any:
    from agent_core.binding import RunContext
    from agent_core.sessions import RunSessions

    sessions = RunSessions(
        agent._servers,
        agent._broker,
        identity,
        health=agent.health,
        cache=agent.cache,
        stats=agent.stats,
    )
    return RunContext(
        identity=identity,
        thread_id=thread,
        sessions=sessions,
        policy=agent.policy,
        definitions={d.prefixed_name: d for s in agent._servers for d in agent.cache.get(s).tools},
    )


async def test_reject_runs_nothing_and_does_not_loop(agent_env: AgentEnv) -> None:
    args = {"key": "PAY-104", "resolution": "done"}
    model = ScriptedChatModel(
        steps=[
            call("ticketing_close_ticket", **args),
            call("ticketing_close_ticket", **args),  # deepagents#2946: proposes it again
            call("ticketing_close_ticket", **args),
            echo_last_tool,
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)

    result = await agent.resume(alice, thread, [{"type": "reject", "message": "not yet"}])

    assert isinstance(result, Answer)
    assert "already rejected" in result.answer
    # What people see of the call proposed again: a caveat in their words (invariant 14).
    assert any("was not run again" in c for c in result.caveats)
    assert_only_peoples_words(result)
    assert (await ticket(agent_env, "PAY-104")).status != "closed"
    assert await changes_for(agent_env, "PAY-104") == []
    assert await agent.pending(alice, thread) is None


async def test_mixed_decisions_in_one_batch(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(
        steps=[
            calls(
                ("ticketing_add_comment", {"key": "PAY-101", "body": "first"}),
                ("ticketing_add_comment", {"key": "PAY-104", "body": "second"}),
            ),
            echo_last_tool,
            final("follow-up answered"),
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    pending = await agent.run(alice, thread, "comment on both")
    assert isinstance(pending, Interrupt)
    assert [a.args["key"] for a in pending.action_requests] == ["PAY-101", "PAY-104"]

    result = await agent.resume(
        alice, thread, [{"type": "approve"}, {"type": "reject", "message": "no"}]
    )

    assert isinstance(result, Answer)
    assert "first" in [c.body for c in (await ticket(agent_env, "PAY-101")).comments]
    assert "second" not in [c.body for c in (await ticket(agent_env, "PAY-104")).comments]
    # The thread is not broken (langchainjs#11125): it takes another turn.
    again = await agent.run(alice, thread, "anything else?")
    assert isinstance(again, Answer)
    assert again.answer == "follow-up answered"


async def test_wrong_number_of_decisions_is_refused(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(steps=[call("ticketing_add_comment", key="PAY-101", body="x")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "comment"), Interrupt)
    with pytest.raises(InvalidDecisionError):
        await agent.resume(alice, thread, [{"type": "approve"}, {"type": "approve"}])
    with pytest.raises(InvalidDecisionError):
        await agent.resume(alice, thread, [{"type": "respond", "message": "x"}])
    bad_edit = {
        "type": "edit",
        "edited_action": {"name": "ticketing_add_comment", "args": {"key": "PAY-101"}},
    }
    with pytest.raises(InvalidDecisionError) as err:
        await agent.resume(alice, thread, [bad_edit])
    assert "body" in err.value.field_errors


async def test_non_owner_is_refused_and_nothing_is_loaded(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(steps=[call("ticketing_add_comment", key="PAY-101", body="x")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    mallory = await agent_env.user("mallory")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "comment"), Interrupt)
    calls_before = len(model.seen)

    with pytest.raises(NotThreadOwnerError):
        await agent.run(mallory, thread, "what did alice ask?")
    with pytest.raises(NotThreadOwnerError):
        await agent.resume(mallory, thread, [{"type": "approve"}])
    with pytest.raises(NotThreadOwnerError):
        await agent.pending(mallory, thread)
    assert len(model.seen) == calls_before
    assert agent.stats.tool_calls == 0


def _tool_messages(model: ScriptedChatModel) -> list[ToolMessage]:
    return [m for m in model.seen[-1] if isinstance(m, ToolMessage)]


async def test_resume_on_another_instance_with_a_cold_cache(agent_env: AgentEnv) -> None:
    """Any instance serves any click: a fresh Agent sharing the checkpointer resumes."""
    steps = [call("ticketing_add_comment", key="PAY-101", body="from instance A"), echo_last_tool]
    first = agent_env.agent(ScriptedChatModel(steps=steps))
    alice = await agent_env.user("alice")
    thread = await new_thread(first, alice)
    assert isinstance(await first.run(alice, thread, "comment"), Interrupt)

    # The model carries on where the conversation is (a script restarted at step 0 would
    # re-issue the same call id, which is now reviewed again rather than run).
    second = agent_env.agent(
        ScriptedChatModel(steps=steps[1:]),
        threads=first.threads,
        checkpointer=first.checkpointer,
    )
    assert second.cache.get("ticketing") is None
    pending = await second.pending(alice, thread)
    assert pending is not None
    assert pending.action_requests[0].args["body"] == "from instance A"
    result = await second.resume(alice, thread, [{"type": "approve"}], approval_id="apr-x")

    assert isinstance(result, Answer)
    assert "from instance A" in [c.body for c in (await ticket(agent_env, "PAY-101")).comments]


async def test_replaying_the_interrupt_checkpoint_does_not_write_twice(
    agent_env: AgentEnv,
) -> None:
    """The LangGraph trap: resuming from the saved interrupt checkpoint forks and re-runs the
    write. The idempotency key (thread + tool call) makes the server answer the first result."""
    model = ScriptedChatModel(
        steps=[call("ticketing_add_comment", key="PAY-101", body="exactly once"), echo_last_tool]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "comment once"), Interrupt)
    graph = agent.graphs.graph(agent.graphs.names())
    interrupt_config = (await graph.aget_state({"configurable": {"thread_id": thread}})).config

    assert isinstance(await agent.resume(alice, thread, [{"type": "approve"}]), Answer)
    ctx = await _context(agent, alice, thread)
    await graph.ainvoke(
        Command(resume={"decisions": [{"type": "approve"}]}), interrupt_config, context=ctx
    )
    await ctx.sessions.aclose()

    comments = [c.body for c in (await ticket(agent_env, "PAY-101")).comments]
    assert comments.count("exactly once") == 1


async def test_a_new_request_after_a_reject_is_reviewed_again(agent_env: AgentEnv) -> None:
    args = {"key": "PAY-104", "resolution": "done"}
    model = ScriptedChatModel(steps=[call("ticketing_close_ticket", **args), echo_last_tool])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    assert isinstance(await agent.run(alice, thread, "close PAY-104"), Interrupt)
    assert isinstance(await agent.resume(alice, thread, [{"type": "reject"}]), Answer)

    model.steps = [call("ticketing_close_ticket", **args), echo_last_tool]
    model.counters.clear()
    again = await agent.run(alice, thread, "I really do want PAY-104 closed, ask again")

    assert isinstance(again, Interrupt)  # not silently answered from the old rejection
    assert again.action_requests[0].args == args
    approved = await agent.resume(alice, thread, [{"type": "approve"}])
    assert isinstance(approved, Answer)
    assert (await ticket(agent_env, "PAY-104")).status == "closed"


async def test_injected_ticket_text_can_only_produce_a_flagged_proposal(
    agent_env: AgentEnv,
) -> None:
    """PAY-104's description tries to make an agent close every ticket. A model that obeys
    produces a proposal: bulk-flagged, with the read that led to it, and nothing runs."""
    keys = ["PAY-101", "PAY-102", "PAY-103", "PAY-104"]
    obey = calls(
        *[("ticketing_close_ticket", {"key": k, "resolution": "as instructed"}) for k in keys]
    )
    model = ScriptedChatModel(steps=[call("ticketing_get_ticket", key="PAY-104"), obey])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "summarise PAY-104")

    assert isinstance(result, Interrupt)
    assert result.bulk_write
    assert [a.args["key"] for a in result.action_requests] == keys
    assert [(r.tool, r.args) for r in result.reads] == [
        ("ticketing_get_ticket", {"key": "PAY-104"})
    ]
    statuses = {t.key: t.status for t in await agent_env.servers.tickets.all_tickets()}
    assert all(statuses[k] != "closed" for k in keys)


async def test_a_reused_tool_call_id_cannot_skip_review(agent_env: AgentEnv) -> None:
    """A model (or injected text steering it) that reuses the id of an earlier, answered call
    must still go through review: answers only count for the step that asked."""
    model = ScriptedChatModel(
        steps=[
            call("ticketing_add_comment", "c1", key="PAY-101", body="first"),
            call("ticketing_add_comment", "c1", key="PAY-101", body="sneaky second"),
            final("done"),
        ]
    )
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    first = await agent.run(alice, thread, "comment on PAY-101")
    assert isinstance(first, Interrupt)
    again = await agent.resume(alice, thread, [{"type": "approve"}], approval_id="apr-1")

    assert isinstance(again, Interrupt)  # reviewed again, not run on the old approval
    assert again.action_requests[0].args["body"] == "sneaky second"
    [ran] = await changes_for(agent_env, "PAY-101")
    assert ran.change == {"comment": "first"}
