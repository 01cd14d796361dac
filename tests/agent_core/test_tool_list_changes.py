"""A server that lists its tools differently later: redeployed, with or without a new version.

opsbot listed a server's tools once per reported version and built the tool the model is
shown once per name, for the life of the process. A team redeploying its own server under the
same version (many servers never change theirs) had its new tools hidden and its changed
ones shown with the old parameters until opsbot restarted, and a tool whose server stopped
marking it ``readOnlyHint`` (it writes now) stayed a read: it ran without an approval.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, Interrupt, ServerConfig, ToolPolicy
from agent_core.threads import MemoryThreadStore
from testing.agent import FAKE_POLICY, FakeBroker, FaultPlan, RawReply, ScriptedChatModel, call
from testing.agent import final as final_answer
from tests.agent_core.test_mcp_bad_replies import JSON, _result
from tests.agent_core.test_tool_errors import run

MAX_AGE = 600.0
ITEM = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
# What the fake server itself lists (testing.agent.build_fake_server).
SERVED = ["fake_change", "fake_lookup", "fake_note", "fake_slow_change", "fake_slow_lookup"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _listing(*tools: dict[str, Any]) -> RawReply:
    return RawReply(200, (JSON,), (_result({"tools": list(tools)}),))


def _agent(
    fake: tuple[str, FaultPlan], listings: list[RawReply], tool: str, trust_hint: bool = False
) -> tuple[FaultPlan, ScriptedChatModel, Clock, Agent]:
    """An agent on ``fake`` whose tool lists come as ``listings`` (then as the server lists
    them), with a model that calls ``tool`` once per run, and the clock its cache reads."""
    url, plan = fake
    plan.raw_replies["tools/list"] = list(listings)
    model = ScriptedChatModel(steps=[call(tool, item="X-1"), final_answer("done")])
    clock = Clock()
    server = ServerConfig("fake", url, url, trust_read_only_hint=trust_hint)
    agent = Agent(
        AgentConfig(servers=(server,), retry_initial_delay=0.0, tools_max_age=MAX_AGE),
        model=model,
        broker=FakeBroker(audiences={"fake": url}),
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy.from_yaml(FAKE_POLICY),
        monotonic=clock,
    )
    return plan, model, clock, agent


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("mcp server")]


def _shown(model: ScriptedChatModel, name: str) -> Any:
    """The tool ``name`` as the model was last given it."""
    return next(t for t in model.bound[-1] if t.name == name)


async def test_a_server_redeployed_under_the_same_version_is_listed_again_after_the_max_age(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_core.agent")
    old = {"name": "lookup", "description": "Old lookup.", "inputSchema": ITEM}
    _, model, clock, agent = _agent(fake, [_listing(old)], "fake_lookup")

    _, first = await run(agent, "look up one")
    clock.now = MAX_AGE - 1
    _, warm = await run(agent, "look up two")

    assert isinstance(first, Answer)
    assert isinstance(warm, Answer)
    assert agent.stats.list_tools_calls == 1  # a warm run lists nothing
    assert model.bound_tools[-1] == ["fake_lookup", "FinalAnswer"]
    assert _shown(model, "fake_lookup").description == "Old lookup."

    clock.now = MAX_AGE + 1  # the server was redeployed meanwhile, its version unchanged
    _, later = await run(agent, "look up three")

    assert isinstance(later, Answer)
    assert agent.stats.list_tools_calls == 2
    assert model.bound_tools[-1] == [*SERVED, "FinalAnswer"]
    # The tool it already knew is shown as the server describes it now.
    assert _shown(model, "fake_lookup").description == "Look an item up (a read)."
    assert _said(caplog) == [
        "mcp server fake: auth=exchange tools=1 allowlisted=1 left out: none",
        "mcp server fake: auth=exchange tools=5 allowlisted=5 left out: none",
    ]


async def test_a_tool_whose_changed_parameters_are_shown_to_the_model_as_they_are_now(
    fake: tuple[str, FaultPlan], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent_core.agent")
    old = {"name": "lookup", "description": "Look up.", "inputSchema": ITEM}
    wider = {
        "type": "object",
        "properties": {"item": {"type": "string"}, "verbose": {"type": "boolean"}},
        "required": ["item"],
    }
    new = {**old, "inputSchema": wider}
    _, model, clock, agent = _agent(fake, [_listing(old), _listing(new)], "fake_lookup")

    await run(agent, "look up one")
    assert set(_shown(model, "fake_lookup").args) == {"item"}
    clock.now = MAX_AGE + 1
    _, result = await run(agent, "look up two")

    assert isinstance(result, Answer)
    assert set(_shown(model, "fake_lookup").args) == {"item", "verbose"}
    assert agent.tool_schema("fake_lookup") == wider
    # Listed again with the same tools: the server's line is not said again.
    assert _said(caplog) == ["mcp server fake: auth=exchange tools=1 allowlisted=1 left out: none"]


async def test_a_tool_no_longer_marked_read_only_needs_an_approval_again(
    fake: tuple[str, FaultPlan],
) -> None:
    """The operator trusts this server's ``readOnlyHint``; its new version drops the hint
    from ``peek`` (which writes now): the model's call of it waits for an approver."""
    hinted = {
        "name": "peek",
        "description": "Peek at an item.",
        "inputSchema": ITEM,
        "annotations": {"readOnlyHint": True},
    }
    unhinted = {**hinted, "annotations": {"readOnlyHint": False}}
    listings = [_listing(hinted), _listing(unhinted)]
    plan, _, clock, agent = _agent(fake, listings, "fake_peek", trust_hint=True)

    _, read = await run(agent, "peek one")
    assert isinstance(read, Answer)  # a read: it ran (the fake has no such tool: it failed)
    assert plan.calls["peek"] == 1

    clock.now = MAX_AGE + 1
    _, proposed = await run(agent, "peek two")

    assert isinstance(proposed, Interrupt)
    assert [a.name for a in proposed.action_requests] == ["fake_peek"]
    assert plan.calls["peek"] == 1  # not sent: it waits for a decision
