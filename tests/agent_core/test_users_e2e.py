"""Users stay apart: interleaved concurrent runs each reach the servers as their own user."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.messages import BaseMessage

from agent_core import Answer, ToolCallEvent
from testing.agent import AgentEnv, FunctionChatModel, call, final, tool_results

TEAM_PROJECT = {"alice": "PAY", "dave": "PLAT"}


def search_then_cite(messages: list[BaseMessage]) -> Any:
    results = tool_results(messages)
    if not results:
        return call("ticketing_search_tickets", query="", limit=50)
    found = json.loads(str(results[-1].content))
    return final("found", [("ticketing", t["key"]) for t in found["tickets"]])


class Recorder:
    def __init__(self) -> None:
        self.events: list[ToolCallEvent] = []
        self.outcomes: list[str] = []

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        self.events.append(event)

    async def tool_call_finished(self, event: ToolCallEvent, outcome: str, latency: float) -> None:
        self.outcomes.append(outcome)


async def test_100_interleaved_runs_of_two_users_each_act_as_their_own_user(
    agent_env: AgentEnv,
) -> None:
    model = FunctionChatModel(fn=search_then_cite)
    agent = agent_env.agent(model)
    recorder = Recorder()
    agent._observer = recorder
    users = {name: await agent_env.user(name) for name in TEAM_PROJECT}
    plan = [("alice" if i % 2 == 0 else "dave") for i in range(100)]
    threads = []
    for i, name in enumerate(plan):
        ref_owner = users[name]
        from agent_core.threads import PlatformRef

        thread = await agent.threads.get_or_create(
            PlatformRef("slack", "T", "C", f"ts-{i}"), ref_owner.subject
        )
        threads.append(thread.thread_id)

    # Warm up: tools discovered once, and each user's token minted once (the broker's cache
    # then serves the burst, as it would in production).
    await agent.run(users["alice"], threads[0], "warm up: discover tools once")
    await agent.run(users["dave"], threads[1], "warm up dave")
    before = agent.stats.sessions_opened
    recorder.events.clear()
    recorder.outcomes.clear()
    list_tools_before = agent.stats.list_tools_calls

    results = await asyncio.gather(
        *(
            agent.run(users[name], tid, f"my tickets ({i})")
            for i, (name, tid) in enumerate(zip(plan, threads, strict=True))
        )
    )

    for name, result in zip(plan, results, strict=True):
        assert isinstance(result, Answer)
        keys = [s.id for s in result.sources]
        # The server filtered by the token's user: a crossed token would show the other team.
        assert keys, f"{name} saw no tickets"
        assert all(k.startswith(TEAM_PROJECT[name] + "-") for k in keys), (name, keys)
    assert len(recorder.events) == 100
    assert recorder.outcomes == ["success"] * 100
    by_thread = dict(zip(threads, plan, strict=True))
    for event in recorder.events:
        assert event.requester == by_thread[event.thread_id]
        assert event.model == "scripted"
        assert event.kind == "read"
    # One session per run and server, never shared: 100 runs, 100 ticketing sessions.
    assert agent.stats.sessions_opened - before == 100
    assert agent.stats.list_tools_calls == list_tools_before  # warm runs list nothing
