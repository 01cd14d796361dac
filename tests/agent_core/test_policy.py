"""Tool policy: validation, fail-closed classification, and the build gate:
every tool the model can see is a read or reviewed (in ``interrupt_on``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware

from agent_core import PolicyError, ToolPolicy, interrupt_on_for
from testing.agent import AgentEnv, ScriptedChatModel, final, new_thread


def test_default_policy_loads_and_classifies() -> None:
    policy = ToolPolicy.load()
    close = policy.classify("ticketing_close_ticket")
    assert close.kind == "write"
    assert close.approver_group == "ticket-leads"
    assert close.sensitive
    assert not close.idempotent
    assert close.max_approval_age == timedelta(seconds=1800)
    read = policy.classify("docs_search_docs")
    assert read.kind == "read"
    assert read.idempotent
    assert read.approver_group is None


def test_unclassified_tool_is_a_sensitive_write() -> None:
    policy = ToolPolicy.load()
    unknown = policy.classify("ticketing_delete_everything")
    assert unknown.kind == "write"
    assert unknown.sensitive
    assert not unknown.classified
    assert not unknown.idempotent
    assert unknown.approver_group == "ops-approvers"
    assert "ticketing_delete_everything" in interrupt_on_for(
        ["ticketing_delete_everything"], policy
    )


@pytest.mark.parametrize(
    "text",
    [
        "tools: [1, 2",  # bad YAML
        "- a list",  # not a mapping
        "tools:\n  x: {kind: maybe}",  # bad kind
        "tools:\n  x: {kind: read, typo: 1}",  # unknown field
        "defaults: {max_approval_age_seconds: -5}",
        "version: 2",
    ],
)
def test_invalid_policy_is_a_clear_error(text: str) -> None:
    with pytest.raises(PolicyError):
        ToolPolicy.from_yaml(text)


def test_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read tool policy"):
        ToolPolicy.load(tmp_path / "nope.yaml")


def test_allowlist_filters_and_absent_allowlist_allows_all() -> None:
    assert not ToolPolicy.load().is_allowed("database_run_readonly_query")
    assert ToolPolicy.from_yaml("tools: {}").is_allowed("anything_at_all")


def test_annotations_never_make_a_read() -> None:
    """A server claiming readOnlyHint does not change the policy: the policy has no input."""
    policy = ToolPolicy.from_yaml("tools: {}")
    assert policy.classify("ticketing_get_ticket").kind == "write"


async def test_every_visible_tool_is_a_read_or_reviewed(agent_env: AgentEnv) -> None:
    """The build gate (invariant 2), against the reference servers as they really are."""
    model = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("carol")
    await agent.run(alice, await new_thread(agent, alice), "hello")

    visible = [n for n in model.bound_tools[-1] if n != "FinalAnswer"]
    assert visible, "no tools discovered"
    assert all(agent.policy.is_allowed(n) for n in visible)  # the allowlist filtered them
    stack = agent.graphs.middleware(visible)
    (hitl,) = [m for m in stack if isinstance(m, HumanInTheLoopMiddleware)]
    for name in visible:
        assert agent.policy.is_read(name) or name in hitl.interrupt_on, name
        if name in hitl.interrupt_on:
            assert hitl.interrupt_on[name]["allowed_decisions"] == ["approve", "edit", "reject"]
    # Every tool the reference servers expose is classified (new tools get reviewed, not
    # silently treated as writes).
    discovered = [
        d.prefixed_name for s in ("ticketing", "docs", "database") for d in agent.cache.get(s).tools
    ]  # type: ignore[union-attr]
    unclassified = [n for n in discovered if not agent.policy.classify(n).classified]
    assert unclassified == []
