"""The Slack app over HTTP against the REAL core: ``assistant.service.Assistant`` with the dev
IdP, a real broker and identity service, the reference MCP servers, the real agent (a scripted
model: no LLM is reachable), approvals and audit in SQL. Only Slack's servers are faked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agent_core import Agent, AgentConfig, ToolPolicy
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import SqlThreadStore
from approvals import SqlApprovalStore
from approvals.service import ApprovalService
from assistant.service import Assistant
from audit import AuditLog, AuditObserver, SqlAuditSink
from broker import ChatUser, LocalIdentityService
from infra.storage import create_engine
from mcp_servers import ReferenceServers
from testing.agent import AgentEnv, FunctionChatModel, call, calls, tool_results
from testing.identity import RunningIdp
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    TEAM_ID,
    block_action,
    card_decided,
    mention,
    text_value,
    view_submission,
)
from tests.bot.conftest import RunApp, SlackEnv
from tests.bot.test_slack_approvals import _buttons
from tests.bot.test_slack_events import _texts

ALICE = ChatUser("slack", TEAM_ID, "U0ALICE")  # team-payments: the requester
BOB = ChatUser("slack", TEAM_ID, "U0BOB")  # ticket-leads: an approver
DAVE = ChatUser("slack", TEAM_ID, "U0DAVE")  # team-platform: not an approver
ERIN_ID = "U0ERIN"  # never linked
_KEY = re.compile(r"\b([A-Z]+-\d+)\b")


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    """The reference servers trust the dev IdP (overrides testing.mcp)."""
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def agent_env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[AgentEnv]:
    from testing.agent import open_agent_env

    async with open_agent_env(dev_idp, reference_servers) as env:
        yield env


def ops_model(messages: list[BaseMessage]) -> AIMessage:
    """A scripted model: 'show KEY' reads and cites the ticket; 'close KEY' reads, then
    proposes close_ticket; after the tool results it answers with what the tools said."""
    human = [m for m in messages if isinstance(m, HumanMessage)][-1]
    text = str(human.content)
    key = _KEY.search(text)
    results = tool_results(messages)
    if key is None:
        return _final("I need a ticket key such as PAY-101.", [])
    if not results:
        return call("ticketing_get_ticket", key=key.group(1))
    if text.lower().startswith("close") and len(results) == 1:
        return call("ticketing_close_ticket", key=key.group(1), resolution="Alert fixed")
    ticket = _json(results[0].content)
    source = {"system": "ticketing", "id": key.group(1), "link": ticket.get("url")}
    return _final(str(results[-1].content)[:300], [source])


def _json(content: Any) -> dict[str, Any]:
    try:
        data = json.loads(content if isinstance(content, str) else json.dumps(content))
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _final(answer: str, sources: list[dict[str, Any]]) -> AIMessage:
    args = {
        "answer": answer,
        "sources": sources,
        "actions_taken": [],
        "pending_approvals": [],
        "caveats": [],
        "confidence": "high",
    }
    return calls(("FinalAnswer", args))


@contextlib.asynccontextmanager
async def real_assistant(
    env: AgentEnv, url: str, model: Any = ops_model, **assistant_options: Any
) -> AsyncIterator[Assistant]:
    engine = create_engine(url)
    identities = LocalIdentityService(env.harness.broker, env.harness.linking)
    try:
        async with open_checkpointer(url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            threads = SqlThreadStore(engine)
            agent = Agent(
                AgentConfig(servers=env.server_configs, retry_initial_delay=0.0),
                # A function scripts the model; a chat model (a streaming one) is used as is.
                model=model if isinstance(model, BaseChatModel) else FunctionChatModel(fn=model),
                broker=identities,
                threads=threads,
                checkpointer=saver,
                policy=ToolPolicy.load(),
                observer=AuditObserver(log),
            )
            service = ApprovalService(
                SqlApprovalStore(engine),
                log,
                agent,
                agent,
                identities.resolve_subject,
                identities,
                runs=assistant_options.get("runs"),  # Stop reaches resumed runs too
            )
            yield Assistant(identities, threads, agent, service, **assistant_options)
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def running(
    run_app: RunApp, agent_env: AgentEnv, url: str
) -> AsyncIterator[tuple[SlackEnv, Assistant]]:
    for name, user in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        await agent_env.harness.link(name, user)
    async with real_assistant(agent_env, url) as assistant, run_app(assistant, url) as env:
        yield env, assistant


async def _changes(servers: ReferenceServers, key: str) -> list[Any]:
    return [c for c in await servers.tickets.all_changes() if c.ticket_key == key]


async def _ask_for_close(env: SlackEnv, key: str, ts: str) -> dict[str, Any]:
    await env.sender.post_event(mention(ALICE.user_id, f"close {key}", channel="C0PAY", ts=ts))
    await env.fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
    )
    (card_ts,) = [ts for (ch, ts) in env.fake.messages if ch == APPROVALS_CHANNEL_ID]
    return env.fake.messages[(APPROVALS_CHANNEL_ID, card_ts)]


async def _click(env: SlackEnv, user: str, action: str, card: dict[str, Any]) -> None:
    value = _buttons(card)[action]["value"]
    status, _ = await env.sender.post_interaction(
        block_action(user, action, value, message_ts=card["ts"])
    )
    assert status == 200


async def test_real_core_mention_answers_with_link_and_unlinked_gets_connect(
    run_app: RunApp, agent_env: AgentEnv, sqlite_url: str
) -> None:
    async with running(run_app, agent_env, sqlite_url) as (env, _assistant):
        await env.sender.post_event(mention(ALICE.user_id, "show PAY-101", ts="1700009000.0001"))
        answer = (await env.fake.wait_for("chat.update", wait=60))[0]
        text = _texts(answer["blocks"])
        assert "Refunds stuck in PENDING" in text
        assert re.search(r"<https?://[^|>]+PAY-101[^|>]*\|ticketing PAY-101>", text), text
        await env.sender.post_event(mention(ERIN_ID, "show PAY-101", ts="1700009000.0002"))
        prompt = (await env.fake.wait_for("chat.postEphemeral", wait=60))[0]
        assert prompt["user"] == ERIN_ID
        assert prompt["blocks"][1]["elements"][0]["url"].startswith(agent_env.idp.issuer)


async def test_real_core_approve_changes_the_ticket_updates_card_tells_requester(
    run_app: RunApp, agent_env: AgentEnv, sqlite_url: str
) -> None:
    servers = agent_env.servers
    async with running(run_app, agent_env, sqlite_url) as (env, _assistant):
        card = await _ask_for_close(env, "PAY-102", "1700009100.0001")
        text = _texts(card["blocks"])
        assert "ticketing_close_ticket" in text
        assert "• *key*: `PAY-102`" in text
        assert "• *resolution*: `Alert fixed`" in text
        assert "ticketing_get_ticket PAY-102" in text  # the chain of reads
        assert await _changes(servers, "PAY-102") == []
        # Another user writing in alice's thread never continues it.
        await env.sender.post_event(
            mention(
                DAVE.user_id,
                "close PAY-102",
                channel="C0PAY",
                ts="1700009100.0002",
                thread_ts="1700009100.0001",
            )
        )
        refusal = await env.fake.wait_for(
            "chat.update", where=lambda p: "belongs to another user" in p["text"], wait=60
        )
        assert refusal[0]["channel"] == "C0PAY"
        # A non-approver's click is refused.
        await _click(env, DAVE.user_id, "approval_approve", card)
        denied = (await env.fake.wait_for("chat.postEphemeral", wait=60))[0]
        assert denied["user"] == DAVE.user_id
        assert "can't decide" in denied["text"]
        # The approver's click runs it, once, as alice.
        await _click(env, BOB.user_id, "approval_approve", card)
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        told = await env.fake.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == "C0PAY" and "approved" in p["text"],
            wait=60,
        )
        changes = await _changes(servers, "PAY-102")
        assert [(c.tool, c.subject) for c in changes] == [("close_ticket", "alice")]
        assert "Alert fixed" in json.dumps(changes[0].change)
        updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
        assert _buttons(updated) == {}
        assert "Approved* by bob" in _texts(updated["blocks"])
        assert told[0]["thread_ts"] == "1700009100.0001"


@pytest.mark.postgres
async def test_real_core_double_click_executes_once(
    run_app: RunApp, agent_env: AgentEnv, postgres_url: str
) -> None:
    servers = agent_env.servers
    async with running(run_app, agent_env, postgres_url) as (env, _assistant):
        card = await _ask_for_close(env, "PAY-103", "1700009200.0001")
        await asyncio.gather(
            *(_click(env, BOB.user_id, "approval_approve", card) for _ in range(4))
        )
        await env.fake.wait_for("chat.postEphemeral", 3, wait=60)
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        await env.fake.settle(limit=60)
        assert [c.tool for c in await _changes(servers, "PAY-103")] == ["close_ticket"]
        notes = env.fake.calls_to("chat.postEphemeral")
        assert all("already decided by bob" in n["text"] for n in notes), [n["text"] for n in notes]


async def test_real_core_edit_invalid_then_valid_runs_the_edited_call(
    run_app: RunApp, agent_env: AgentEnv, sqlite_url: str
) -> None:
    servers = agent_env.servers
    async with running(run_app, agent_env, sqlite_url) as (env, _assistant):
        card = await _ask_for_close(env, "PAY-102", "1700009300.0001")
        await _click(env, BOB.user_id, "approval_edit", card)
        modal = (await env.fake.wait_for("views.open", wait=60))[0]["view"]
        inputs = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
        assert sorted(inputs) == ["arg:key", "arg:resolution"]  # no idempotency_key
        bad = {"arg:key": text_value("PAY-102"), "arg:resolution": text_value("no")}
        status, body = await env.sender.post_interaction(view_submission(BOB.user_id, modal, bad))
        assert status == 200
        assert json.loads(body)["response_action"] == "errors"
        assert "arg:resolution" in json.loads(body)["errors"]
        wrong_key = {"arg:key": text_value("nonsense"), "arg:resolution": text_value("Rolled back")}
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, wrong_key)
        )
        assert json.loads(body)["errors"].keys() == {"arg:key"}  # the core's schema check
        assert await _changes(servers, "PAY-102") == []
        good = {"arg:key": text_value("PAY-102"), "arg:resolution": text_value("Rolled back")}
        status, body = await env.sender.post_interaction(view_submission(BOB.user_id, modal, good))
        assert (status, body) == (200, "")
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        changes = await _changes(servers, "PAY-102")
        assert [(c.tool, c.subject) for c in changes] == [("close_ticket", "alice")]
        assert "Rolled back" in json.dumps(changes[0].change)
        updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
        assert "Approved with edits* by bob" in _texts(updated["blocks"])


async def test_real_core_reject_writes_nothing(
    run_app: RunApp, agent_env: AgentEnv, sqlite_url: str
) -> None:
    servers = agent_env.servers
    async with running(run_app, agent_env, sqlite_url) as (env, _assistant):
        card = await _ask_for_close(env, "PAY-102", "1700009400.0001")
        await _click(env, BOB.user_id, "approval_reject", card)
        modal = (await env.fake.wait_for("views.open", wait=60))[0]["view"]
        status, _ = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, {"reason": text_value("not yet")})
        )
        assert status == 200
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        told = await env.fake.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == "C0PAY" and "rejected" in p["text"],
            wait=60,
        )
        await env.fake.settle(limit=60)
        assert await _changes(servers, "PAY-102") == []
        assert told[0]["thread_ts"] == "1700009400.0001"
        updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
        assert "Rejected* by bob" in _texts(updated["blocks"])
