"""Streaming in Teams personal chats, over HTTP against the fake channel (which enforces
Teams' rules: personal chats only, the stream id from the first request, a growing
``streamSequence``, streamed text that keeps what came before, a final message): an
informative update while tools run, the text as it is written, then the final message with
the sources' card. Channels keep typing and one card; a chat that refuses streaming too."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.teams.adapter import APPROVAL_HANDOFF_TEXT
from bot.teams.core import ChatUser
from testing.agent import AgentEnv, StreamingFunctionChatModel
from testing.fake_assistant import FakeAssistant
from testing.teams import TENANT_ID, ConnectorCall, new_user, stream_info
from tests.bot.test_slack_e2e import (
    agent_env,  # noqa: F401  (fixture)
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    real_assistant,
)
from tests.bot.test_slack_streaming import LONG_ANSWER, two_tool_long_answer
from tests.fixtures.teams import RunTeams, TeamsEnv

ALICE = new_user("Alice")
ALICE_CHAT = ChatUser("teams", TENANT_ID, ALICE.aad_object_id)
ANSWER_START = "PAY-1 is open. It was filed by the payments team. Its runbook is linked below. "


@pytest.fixture
def assistant() -> FakeAssistant:
    fake = FakeAssistant(stream_answers=0.05, run_delay=0.1)  # the tool call takes a while
    fake.link(ALICE_CHAT, "alice", {"team-payments"})
    return fake


@pytest.fixture(params=["in_process", "durable"])
async def env(
    request: pytest.FixtureRequest, run_teams: RunTeams, assistant: FakeAssistant
) -> AsyncIterator[TeamsEnv]:
    async with run_teams(
        assistant, durable=request.param == "durable", streaming=True, stream_every_seconds=0.0
    ) as running:
        yield running


def _sent(env: TeamsEnv, conversation: str) -> list[dict[str, Any]]:
    return [c.message for c in env.fake.calls if c.conversation_id == conversation]


async def test_personal_chat_streams_updates_then_the_text_then_the_final_card(
    env: TeamsEnv,
) -> None:
    ask = env.fake.personal(ALICE, "what about PAY-1?")
    assert (await env.post(ask))[0] == 202
    conversation = ask["conversation"]["id"]
    (final_call,) = await env.fake.wait_for(
        "posted", where=lambda c: c.conversation_id == conversation
    )
    await env.fake.settle(quiet=0.2)
    everything = _sent(env, conversation)
    # Typing until the run's first event opens the stream; then everything belongs to one
    # stream: no more typing, no second reply.
    opened = next(i for i, a in enumerate(everything) if stream_info(a) is not None)
    assert {a["type"] for a in everything[:opened]} <= {"typing"}
    assert all(stream_info(a) is None for a in everything[:opened])
    sent = everything[opened:]
    infos = [stream_info(a) for a in sent]
    assert all(info is not None for info in infos)
    (stream_id,) = env.fake.streams
    assert env.fake.streams[stream_id] == sent
    kinds = [info["streamType"] for info in infos if info]
    # Informative first ("Working on it…", then the tool being called), then the text as it
    # is written, then the final message.
    assert kinds[0] == "informative"
    assert sent[0]["text"] == "Working on it…"
    assert "informative" in kinds[1:]
    assert kinds[-1] == "final"
    assert any("ticketing · get ticket PAY-1" in a["text"] for a in sent if a["type"] == "typing")
    streamed = [a["text"] for a, kind in zip(sent, kinds, strict=True) if kind == "streaming"]
    assert len(streamed) >= 2
    assert streamed[-1] == ANSWER_START
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(streamed))
    # streamSequence grows by one from 1 and the final has none; the stream's id (from the
    # first answer) is on every later request.
    sequences = [info.get("streamSequence") for info in infos if info]
    assert sequences[:-1] == list(range(1, len(sent)))
    assert sequences[-1] is None
    assert all(info["streamId"] == stream_id for info in infos[1:] if info)
    assert "streamId" not in (infos[0] or {})
    # The final message: the whole answer's text, its sources and caveats on a card.
    final = final_call.message
    assert final["type"] == "message"
    assert final["text"] == ANSWER_START + "You asked: what about PAY-1?"
    (card,) = final_call.cards
    body = json.dumps(card)
    assert "[ticketing PAY-1](http://tickets.test/PAY-1)" in body
    assert "Ticket data may be a minute old." in body
    assert env.fake.messages[(conversation, stream_id)]["text"] == final["text"]


async def test_a_write_waiting_for_approval_ends_the_stream_and_follows_as_messages(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    ask = env.fake.personal(ALICE, "update PAY-1 status closed")
    await env.post(ask)
    conversation = ask["conversation"]["id"]
    final, so_far, note = await env.fake.wait_for(
        "posted", 3, where=lambda c: c.conversation_id == conversation
    )
    await env.bot.adapter.idle()
    # The stream (opened by the read) ends first, saying what follows; then the answer so
    # far and the approval note, as ordinary cards after it.
    (stream_id,) = env.fake.streams
    assert env.fake.streams[stream_id][-1] == final.message
    assert final.message["text"] == APPROVAL_HANDOFF_TEXT
    assert stream_info(so_far.message) is None
    assert stream_info(note.message) is None
    assert "I can update PAY-1 once approved." in so_far.text
    assert "needs approval" in note.text
    assert len(assistant.approvals) == 1


async def unstreamed_reply(env: TeamsEnv, ask: dict[str, Any]) -> ConnectorCall:
    """Post ``ask``; its one reply, checked to be an ordinary card (no stream anywhere)."""
    await env.post(ask)
    conversation = ask["conversation"]["id"]
    (reply,) = await env.fake.wait_for("posted", where=lambda c: c.conversation_id == conversation)
    await env.fake.settle(quiet=0.2)
    assert env.fake.streams == {}
    (card,) = reply.cards
    assert "PAY-1 is open" in json.dumps(card)
    return reply


async def test_a_channel_mention_keeps_typing_and_one_card(env: TeamsEnv) -> None:
    ask = env.fake.mention(ALICE, "show PAY-1")
    await unstreamed_reply(env, ask)
    sent = _sent(env, ask["conversation"]["id"])
    assert all(stream_info(a) is None for a in sent)
    assert {a.get("type") for a in sent} == {"typing", "message"}


async def test_a_chat_that_refuses_streaming_gets_typing_and_the_card(env: TeamsEnv) -> None:
    env.fake.fail_next["send"] = [403]  # the stream's first request is refused
    reply = await unstreamed_reply(env, env.fake.personal(ALICE, "what about PAY-1?"))
    assert stream_info(reply.message) is None


async def test_the_real_core_with_a_streaming_model_streams_its_answer_in_teams(
    run_teams: RunTeams,
    agent_env: AgentEnv,  # noqa: F811  (the fixture imported above)
    sqlite_url: str,
) -> None:
    """The whole path: the real core runs two MCP calls on the reference servers, then a
    streaming model writes the answer; Teams gets the tool updates, whole sentences of the
    answer (never its JSON), then the checked answer with the source the tool carried."""
    await agent_env.harness.link("alice", ALICE_CHAT)
    model = StreamingFunctionChatModel(fn=two_tool_long_answer, chunk_chars=16)
    async with (
        real_assistant(agent_env, sqlite_url, model) as assistant,
        run_teams(assistant, streaming=True, stream_every_seconds=0.0) as env,
    ):
        ask = env.fake.personal(ALICE, "what about PAY-101?")
        assert (await env.post(ask))[0] == 202
        conversation = ask["conversation"]["id"]
        (final_call,) = await env.fake.wait_for(
            "posted", where=lambda c: c.conversation_id == conversation, wait=60
        )
        await env.fake.settle(quiet=0.3)
        (stream_id,) = env.fake.streams
        sent = env.fake.streams[stream_id]
        texts = [a["text"] for a in sent if a["type"] == "typing"]
        assert any("ticketing · get ticket PAY-101" in t for t in texts)
        assert any("docs · search docs refunds" in t for t in texts)
        streamed = [
            a["text"] for a in sent if (stream_info(a) or {}).get("streamType") == "streaming"
        ]
        assert streamed
        assert all(LONG_ANSWER.startswith(t) and t.endswith((". ", "\n")) for t in streamed)
        assert final_call.message["text"] == LONG_ANSWER
        (card,) = final_call.cards
        assert "ticketing PAY-101](http" in json.dumps(card)
        assert agent_env.servers.ticketing.server.served == ["get_ticket"]
        assert agent_env.servers.docs.server.served == ["search_docs"]
