"""The offline demo model drives real runs against the reference servers."""

from __future__ import annotations

import pytest

from agent_core import Answer, Interrupt
from agent_core.demo_model import HELP, DemoChatModel, _intent
from agent_core.models import build_model
from testing.agent import AgentEnv, new_thread


@pytest.mark.parametrize(
    ("text", "tool", "args"),
    [
        ("show ticket PAY-101", "ticketing_get_ticket", {"key": "PAY-101"}),
        ("Show me pay-102 please", "ticketing_get_ticket", {"key": "PAY-102"}),
        ("search tickets refunds", "ticketing_search_tickets", {"query": "refunds"}),
        (
            "find tickets about checkout latency",
            "ticketing_search_tickets",
            {"query": "checkout latency"},
        ),
        (
            "close ticket PAY-104 because alert fixed",
            "ticketing_close_ticket",
            {"key": "PAY-104", "resolution": "alert fixed"},
        ),
        (
            "comment on PAY-101: looking into it",
            "ticketing_add_comment",
            {"key": "PAY-101", "body": "looking into it"},
        ),
        ("search runbooks refund", "docs_search_docs", {"query": "refund"}),
        ("any failed jobs?", "database_list_failed_jobs", {"since_hours": 720}),
        ("recent deploys of checkout-api", "database_recent_deploys", {"service": "checkout-api"}),
    ],
)
def test_documented_phrasings(text: str, tool: str, args: dict[str, object]) -> None:
    assert _intent(text) == (tool, args)


def test_unknown_phrasing_gets_help_and_demo_is_built_from_settings_name() -> None:
    assert _intent("write me a poem") is None
    assert isinstance(build_model("demo"), DemoChatModel)
    assert "offline demo" in HELP


async def test_demo_answers_a_read_with_verified_sources(agent_env: AgentEnv) -> None:
    agent = agent_env.agent(DemoChatModel())
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "show ticket PAY-101")

    assert isinstance(result, Answer)
    assert [(s.system, s.id) for s in result.sources] == [("ticketing", "PAY-101")]
    assert "Refunds stuck" in result.answer
    assert result.model_used == "demo"


async def test_demo_write_goes_through_approval(agent_env: AgentEnv) -> None:
    agent = agent_env.agent(DemoChatModel())
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    pending = await agent.run(alice, thread, "close ticket PAY-104 because alert fixed")
    assert isinstance(pending, Interrupt)
    assert pending.action_requests[0].name == "ticketing_close_ticket"
    done = await agent.resume(alice, thread, [{"type": "approve"}])

    assert isinstance(done, Answer)
    # Built from the executed call's record: what ran, with its arguments, and how it ended.
    assert done.actions_taken == [
        "ticketing_close_ticket (key=PAY-104, resolution=alert fixed): done"
    ]
    tickets = {t.key: t for t in await agent_env.servers.tickets.all_tickets()}
    assert tickets["PAY-104"].status == "closed"


async def test_demo_docs_and_database(agent_env: AgentEnv) -> None:
    agent = agent_env.agent(DemoChatModel())
    carol = await agent_env.user("carol")
    docs = await agent.run(carol, await new_thread(agent, carol), "search runbooks memory")
    deploys = await agent.run(carol, await new_thread(agent, carol), "recent deploys")
    assert isinstance(docs, Answer)
    assert isinstance(deploys, Answer)
    assert docs.sources
    assert all(s.system == "docs" for s in docs.sources)
    assert deploys.sources
    assert all(s.system == "database" for s in deploys.sources)


def test_demo_summarises_deterministically_when_called_without_tools() -> None:
    from langchain_core.messages import HumanMessage

    out = DemoChatModel().invoke([HumanMessage(content="show ticket PAY-101")])
    assert "demo summary" in out.text
    assert "PAY-101" in out.text
