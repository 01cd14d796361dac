"""Streamed answers over HTTP against the real core (signed requests, the reference MCP
servers, a scripted model) and the in-repo fake Slack with its agent features on: one task
per MCP call as it happens, the answer, its sources, feedback buttons; agent session status
through an approval; the placeholder when Slack refuses streaming."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from agent_core.runs import SqlRunRegistry
from assistant.service import Assistant
from audit import AuditLog, SqlAuditSink
from audit.log import AuditQuery, EventKind
from infra.observability.metrics import REGISTRY
from infra.storage import create_engine
from testing.agent import AgentEnv, StreamingFunctionChatModel, call, tool_results
from testing.fake_assistant import FakeAssistant
from testing.slack import TEAM_ID, block_action, card_decided, mention
from tests.bot.conftest import RunApp, SlackEnv
from tests.bot.test_slack_e2e import (
    ALICE,
    BOB,
    DAVE,
    _click,
    _final,
    _json,
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    ops_model,
    real_assistant,
)
from tests.bot.test_slack_events import _texts

CHANNEL = "C0PAY"


def two_tool_model(messages: list[BaseMessage]) -> AIMessage:
    """Reads the ticket, then searches the docs, then answers citing both."""
    results = tool_results(messages)
    if not results:
        return call("ticketing_get_ticket", key="PAY-101")
    if len(results) == 1:
        return call("docs_search_docs", query="refunds")
    ticket = _json(results[0].content)
    return _final(
        "PAY-101 is about refunds stuck in PENDING; the runbook explains the retry.",
        [{"system": "ticketing", "id": "PAY-101", "link": ticket.get("url")}],
    )


@contextlib.asynccontextmanager
async def agent_stack(
    run_app: RunApp, agents: AgentEnv, url: str, model: Any = ops_model, **options: Any
) -> AsyncIterator[tuple[SlackEnv, Assistant]]:
    """The real core (with the run registry Stop needs) behind the Slack app, the fake
    Slack's streaming and agent sessions on."""
    for name, user in (("alice", ALICE), ("bob", BOB), ("dave", DAVE)):
        await agents.harness.link(name, user)
    engine = create_engine(url)
    try:
        async with (
            real_assistant(agents, url, model, runs=SqlRunRegistry(engine)) as assistant,
            run_app(assistant, url, **options) as env,
        ):
            env.fake.agent_features = True
            yield env, assistant
    finally:
        await engine.dispose()


def stream_of(env: SlackEnv, thread_ts: str) -> tuple[tuple[str, str], list[dict[str, Any]]]:
    """The one streamed message in ``thread_ts`` and every chunk sent into it, in order."""
    (key,) = [
        k
        for k, m in env.fake.messages.items()
        if k in env.fake.streams and m.get("thread_ts") == thread_ts
    ]
    return key, env.fake.streams[key]


async def ask_until_stopped(env: SlackEnv, ts: str) -> dict[str, Any]:
    """Alice asks about PAY-101 at ``ts``; the ``chat.stopStream`` call that ends the answer."""
    await env.sender.post_event(
        mention(ALICE.user_id, "what about PAY-101?", channel=CHANNEL, ts=ts)
    )
    (stopped,) = await env.fake.wait_for("chat.stopStream", wait=60)
    await env.fake.settle()
    return stopped


def tasks(chunks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["title"], c["status"]) for c in chunks if c["type"] == "task_update"]


async def test_two_tool_answer_streams_a_task_per_call_then_the_answer_sources_and_feedback(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with agent_stack(run_app, agent_env, sqlite_url, two_tool_model) as (env, _):
        ts = "1700010000.0001"
        stopped = await ask_until_stopped(env, ts)
        (start,) = env.fake.calls_to("chat.startStream")
        assert (start["channel"], start["thread_ts"]) == (CHANNEL, ts)
        assert (start["recipient_team_id"], start["recipient_user_id"]) == (TEAM_ID, "U0ALICE")
        key, chunks = stream_of(env, ts)
        assert stopped["ts"] == key[1]
        # One task per MCP call, in the order the calls happened, each started then done;
        # the answer's text after every task; nothing but chunks Slack documents.
        assert tasks(chunks) == [
            ("ticketing · get ticket PAY-101", "in_progress"),
            ("ticketing · get ticket PAY-101", "complete"),
            ("docs · search docs refunds", "in_progress"),
            ("docs · search docs refunds", "complete"),
        ]
        ids = [c["id"] for c in chunks if c["type"] == "task_update"]
        assert ids[0] == ids[1] != ids[2] == ids[3]
        assert [c["type"] for c in chunks][-1] == "markdown_text"
        assert chunks[-1]["text"].startswith("PAY-101 is about refunds stuck in PENDING")
        assert {c["type"] for c in chunks} == {"task_update", "markdown_text"}
        # At the end: the sources (a link the tool result carried), then feedback buttons.
        message = env.fake.messages[key]
        assert message["streaming"] is False
        sources, feedback = message["blocks"][0], message["blocks"][-1]
        assert "Sources" in _texts([sources])
        assert "|ticketing PAY-101>" in _texts([sources])
        assert feedback["type"] == "context_actions"
        (buttons,) = feedback["elements"]
        assert buttons["type"] == "feedback_buttons"
        assert (buttons["positive_button"]["value"], buttons["negative_button"]["value"]) == (
            "positive",
            "negative",
        )
        # No placeholder: the stream is the answer.
        assert env.fake.calls_to("chat.postMessage") == []
        assert env.fake.calls_to("chat.update") == []
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "active"]
        # Server-side: exactly the two calls, once each.
        assert agent_env.servers.ticketing.server.served == ["get_ticket"]
        assert agent_env.servers.docs.server.served == ["search_docs"]


LONG_ANSWER = (
    "PAY-101 is about refunds stuck in PENDING since the last deploy. "
    "The runbook says to retry the settlement job once the processor is back. "
    "Nothing was changed: both calls were reads.\n"
    "Ask me to close it when the retry went through."
)


def two_tool_long_answer(messages: list[BaseMessage]) -> AIMessage:
    """``two_tool_model`` with an answer of several sentences (worth streaming)."""
    results = tool_results(messages)
    if len(results) < 2:
        return two_tool_model(messages)
    ticket = _json(results[0].content)
    return _final(
        LONG_ANSWER, [{"system": "ticketing", "id": "PAY-101", "link": ticket.get("url")}]
    )


async def test_a_streaming_model_s_answer_is_appended_as_it_is_written_after_the_tasks(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    model = StreamingFunctionChatModel(fn=two_tool_long_answer, chunk_chars=16)
    async with agent_stack(run_app, agent_env, sqlite_url, model) as (env, _):
        ts = "1700010000.0009"
        stopped = await ask_until_stopped(env, ts)
        key, chunks = stream_of(env, ts)
        # The tasks first (each started, then done), then only the answer's text.
        assert tasks(chunks) == [
            ("ticketing · get ticket PAY-101", "in_progress"),
            ("ticketing · get ticket PAY-101", "complete"),
            ("docs · search docs refunds", "in_progress"),
            ("docs · search docs refunds", "complete"),
        ]
        kinds = [c["type"] for c in chunks]
        assert kinds[:4] == ["task_update"] * 4
        assert set(kinds[4:]) == {"markdown_text"}
        texts = [c["text"] for c in chunks[4:]]
        # Appended while the model wrote (before the stream was stopped), in whole
        # sentences, then the rest at stopStream: together exactly the answer, never JSON.
        appended = [
            c["text"]
            for call_ in env.fake.calls_to("chat.appendStream")
            for c in call_.get("chunks") or []
            if c["type"] == "markdown_text"
        ]
        assert len(appended) >= 2
        assert texts[: len(appended)] == appended
        assert all(t.endswith((". ", "\n")) for t in appended)
        assert "".join(texts) == LONG_ANSWER
        assert not any("{" in t or '"answer"' in t for t in texts)
        assert env.fake.messages[key]["text"] == LONG_ANSWER
        # Then the sources and the feedback buttons, when the stream stops.
        assert stopped["ts"] == key[1]
        message = env.fake.messages[key]
        assert message["streaming"] is False
        assert "|ticketing PAY-101>" in _texts([message["blocks"][0]])
        assert message["blocks"][-1]["type"] == "context_actions"
        assert env.fake.calls_to("chat.postMessage") == []
        assert agent_env.servers.ticketing.server.served == ["get_ticket"]
        assert agent_env.servers.docs.server.served == ["search_docs"]


async def test_feedback_click_is_audited_and_counted(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    def count(rating: str) -> float:
        return REGISTRY.get_sample_value("opsbot_answer_feedback_total", {"rating": rating}) or 0.0

    async with agent_stack(run_app, agent_env, sqlite_url) as (env, _):
        ts = "1700010100.0001"
        await env.sender.post_event(mention(ALICE.user_id, "show PAY-101", channel=CHANNEL, ts=ts))
        await env.fake.wait_for("chat.stopStream", wait=60)
        key, _chunks = stream_of(env, ts)
        before_bad, before_good = count("negative"), count("positive")
        click = block_action(ALICE.user_id, "answer_feedback", "negative", channel=CHANNEL)
        click["message"] = {"type": "message", "ts": key[1], "thread_ts": ts}
        click["container"]["message_ts"] = key[1]
        click["actions"][0].update(type="feedback_buttons", block_id="answer_feedback")
        status, _ = await env.sender.post_interaction(click)
        assert status == 200
        (thanks,) = await env.fake.wait_for("chat.postEphemeral", wait=30)
        assert thanks["user"] == ALICE.user_id
        assert count("negative") == before_bad + 1
        assert count("positive") == before_good
        engine = create_engine(sqlite_url)
        try:
            audit = AuditLog(SqlAuditSink(engine))
            (event,) = await audit.query(AuditQuery(kinds=(EventKind.FEEDBACK,)))
            calls = await audit.query(AuditQuery(kinds=(EventKind.TOOL_CALL,)))
        finally:
            await engine.dispose()
        assert (event.requester, event.outcome) == ("alice", "negative")
        # The answer's own thread: the one its tool call ran in.
        assert {c.thread_id for c in calls} == {event.thread_id}


async def test_session_is_suspended_while_an_approval_waits_and_active_after_it(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with agent_stack(run_app, agent_env, sqlite_url) as (env, _):
        ts = "1700010200.0001"
        await env.sender.post_event(mention(ALICE.user_id, "close PAY-102", channel=CHANNEL, ts=ts))
        await env.fake.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await env.fake.settle()
        _key, chunks = stream_of(env, ts)
        # The read ran; the gated write stays pending, waiting in #ops-approvals.
        assert tasks(chunks) == [
            ("ticketing · get ticket PAY-102", "in_progress"),
            ("ticketing · get ticket PAY-102", "complete"),
            ("ticketing · close ticket PAY-102", "pending"),
        ]
        pending = [c for c in chunks if c["type"] == "task_update"][-1]
        assert pending["details"] == "awaiting approval in #ops-approvals"
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "suspended"]
        assert agent_env.servers.ticketing.server.served == ["get_ticket"]
        (card_key,) = [k for k in env.fake.messages if k[0] == "C0APPROVALS"]
        await _click(env, BOB.user_id, "approval_approve", env.fake.messages[card_key])
        await env.fake.wait_for("chat.update", where=card_decided, wait=60)
        await env.fake.settle()
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "suspended", "active"]
        assert agent_env.servers.ticketing.server.served == ["get_ticket", "close_ticket"]


async def test_streaming_refused_falls_back_to_the_placeholder_replaced_by_the_answer(
    run_app: RunApp,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    async with agent_stack(run_app, agent_env, sqlite_url) as (env, _):
        env.fake.agent_features = False  # Slack answers unknown_method, as the sandbox does
        for n, ts in enumerate(("1700010300.0001", "1700010300.0002"), start=1):
            await env.sender.post_event(
                mention(ALICE.user_id, "show PAY-101", channel=CHANNEL, ts=ts)
            )
            answer = (await env.fake.wait_for("chat.update", n, wait=60))[-1]
            assert "Refunds stuck in PENDING" in _texts(answer["blocks"])
            placeholder = env.fake.calls_to("chat.postMessage")[n - 1]
            assert (placeholder["thread_ts"], placeholder["text"]) == (ts, "Working on it…")
            assert answer["ts"] != ts
        await env.fake.settle()
        # Asked once; a workspace without the method is not asked again by this process.
        assert len([c for c in env.fake.calls if c.method == "chat.startStream"]) == 1
        assert len([c for c in env.fake.calls if c.method == "agents.sessions.setStatus"]) == 1
        assert env.fake.streams == {}
        assert env.fake.sessions == {}


async def test_a_stream_that_breaks_midway_still_delivers_the_answer_as_a_message(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    async with run_app(fake_assistant) as env:
        env.fake.agent_features = True
        env.fake.fail_next("chat.stopStream", 200, error="message_not_in_streaming_state")
        ts = "1700010400.0001"
        await env.sender.post_event(mention(ALICE.user_id, "hello", channel=CHANNEL, ts=ts))
        (posted,) = await env.fake.wait_for("chat.postMessage", wait=30)
        await env.fake.settle()
        assert posted["thread_ts"] == ts
        assert "PAY-1 is open" in _texts(posted["blocks"])
        _key, chunks = stream_of(env, ts)
        assert tasks(chunks) == [
            ("ticketing · get ticket PAY-1", "in_progress"),
            ("ticketing · get ticket PAY-1", "complete"),
        ]
        assert env.fake.sessions[(CHANNEL, ts)] == ["processing", "active"]


async def test_streaming_switched_off_uses_the_placeholder_without_asking_slack(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    async with run_app(fake_assistant, streaming=False) as env:
        env.fake.agent_features = True
        await env.sender.post_event(mention(ALICE.user_id, "hello", channel=CHANNEL))
        (answer,) = await env.fake.wait_for("chat.update", wait=30)
        await env.fake.settle()
        assert "PAY-1 is open" in _texts(answer["blocks"])
        assert env.fake.calls_to("chat.startStream") == []
        assert env.fake.streams == {}
