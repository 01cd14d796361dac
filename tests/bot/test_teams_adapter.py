"""The Teams adapter over HTTP against the fake channel, beyond the parity scenarios: how
answers look (cards, sources, splitting, links), typing while working, approvals waiting,
refusals, the database going away, and conversation references kept for proactive posts —
in process and as durable jobs."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from bot.teams.core import Answer, Answered, ChatUser, PlatformRef, Source
from bot.teams.durable import DurableTeamsAdapter
from bot.teams.incoming import CHAT_THREAD, delivery_id, short_key
from bot.teams.render import CARD_TEXT_LIMIT, split_text
from bot.teams.store import SqlConversations, SqlProcessedActivities
from infra.jobs.inbox import JobInbox
from infra.jobs.queue import JobStatus, SqlJobQueue
from infra.storage.schema import processed_events, teams_conversations
from testing.fake_assistant import FakeAssistant
from testing.teams import CHANNEL_ID, TENANT_ID, new_user
from tests.fixtures.teams import RunTeams, TeamsEnv

ALICE = new_user("Alice")
ALICE_CHAT = ChatUser("teams", TENANT_ID, ALICE.aad_object_id)


@pytest.fixture
def assistant() -> FakeAssistant:
    fake = FakeAssistant()
    fake.link(ALICE_CHAT, "alice", {"team-payments"})
    return fake


@pytest.fixture(params=["in_process", "durable"])
async def env(
    request: pytest.FixtureRequest, run_teams: RunTeams, assistant: FakeAssistant
) -> AsyncIterator[TeamsEnv]:
    async with run_teams(assistant, durable=request.param == "durable") as running:
        yield running


def _cards(env: TeamsEnv, conversation: str) -> list[dict[str, Any]]:
    return [
        card for c in env.fake.posted() if c.conversation_id == conversation for card in c.cards
    ]


async def test_answer_is_an_adaptive_card_in_the_thread(env: TeamsEnv) -> None:
    ask = env.fake.mention(ALICE, "show PAY-1")
    assert (await env.post(ask))[0] == 202
    conversation = ask["conversation"]["id"]
    (reply,) = await env.fake.wait_for("posted", where=lambda c: c.conversation_id == conversation)
    # A reply in the thread the mention started (its root is the mention itself).
    assert reply.kind == "reply"
    assert reply.activity_id == ask["id"]
    (card,) = reply.cards
    assert card["version"] == "1.5"
    body = json.dumps(card)
    assert "PAY-1 is open" in body
    assert "[ticketing PAY-1](http://tickets.test/PAY-1)" in body
    assert "Ticket data may be a minute old." in body
    # The bot called the Connector with the token from the bot's own client-credentials grant.
    assert reply.token == env.fake.connector_token
    assert env.fake.token_requests == 1


async def test_typing_is_shown_while_the_core_works(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    assistant.run_delay = 0.5
    ask = env.fake.personal(ALICE, "slow question")
    await env.post(ask)
    conversation = ask["conversation"]["id"]
    await env.fake.wait_for("posted", where=lambda c: c.conversation_id == conversation)
    kinds = [c.message.get("type") for c in env.fake.calls if c.conversation_id == conversation]
    assert kinds[0] == "typing"
    assert kinds[-1] == "message"


async def test_long_answer_is_split_and_sources_come_last(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    ask = env.fake.personal(ALICE, "long")
    await env.post(ask)
    conversation = ask["conversation"]["id"]
    await env.fake.wait_for("posted", 2, where=lambda c: c.conversation_id == conversation)
    await env.fake.settle(quiet=0.2)
    cards = _cards(env, conversation)
    assert len(cards) >= 2
    for card in cards:
        assert len(json.dumps(card)) < 80_000
    assert "Sources" in json.dumps(cards[-1])
    assert all("Sources" not in json.dumps(c) for c in cards[:-1])


def test_split_text_cuts_between_paragraphs() -> None:
    text = "\n\n".join(f"para {i} " + "word " * 300 for i in range(30))
    pieces = split_text(text)
    assert len(pieces) > 1
    assert all(len(p) <= CARD_TEXT_LIMIT for p in pieces)
    assert all(p.startswith("para ") for p in pieces)
    assert "".join(pieces).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(
        " ", ""
    )


async def test_a_link_the_model_wrote_is_not_clickable(
    env: TeamsEnv, assistant: FakeAssistant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def answer(*_args: Any, **_kwargs: Any) -> Answered:
        return Answered(
            Answer(
                "See [the fix](http://evil.example/steal) and [PAY-1](http://tickets.test/PAY-1)"
                " <img src=x onerror=alert(1)>",
                sources=[Source("ticketing", "PAY-1", "http://tickets.test/PAY-1")],
            )
        )

    monkeypatch.setattr(assistant, "handle_message", answer)
    ask = env.fake.personal(ALICE, "hi")
    await env.post(ask)
    (reply,) = await env.fake.wait_for(
        "posted", where=lambda c: c.conversation_id == ask["conversation"]["id"]
    )
    body = json.dumps(reply.cards)
    assert "evil.example" not in body
    assert "See the fix and [PAY-1](http://tickets.test/PAY-1)" in body
    assert "<img" not in body


async def test_waiting_for_approval_is_said_in_the_thread(
    env: TeamsEnv, assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    ask = env.fake.mention(ALICE, "update PAY-1 status closed")
    with caplog.at_level(logging.INFO):
        await env.post(ask)
        so_far, note = await env.fake.wait_for(
            "posted", 2, where=lambda c: c.conversation_id == ask["conversation"]["id"]
        )
        await env.bot.adapter.idle()
    assert "I can update PAY-1 once approved." in so_far.text
    assert "needs approval" in note.text
    assert len(assistant.approvals) == 1
    # The approvals seam was handed the request; with no approvals channel configured here
    # it says so (cards: tests/bot/test_teams_approvals.py).
    assert any("no Teams approvals channel configured" in r.getMessage() for r in caplog.records)


async def test_too_long_a_message_is_refused_without_echo(
    run_teams: RunTeams, assistant: FakeAssistant
) -> None:
    async with run_teams(assistant, max_message_chars=20) as env:
        ask = env.fake.personal(ALICE, "x" * 21 + " secret-ish text")
        await env.post(ask)
        (reply,) = await env.fake.wait_for(
            "posted", where=lambda c: c.conversation_id == ask["conversation"]["id"]
        )
    assert "too long" in reply.text
    assert "secret-ish" not in reply.text
    assert assistant.messages == []


async def test_conversation_reference_is_kept_for_proactive_posts(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    personal = env.fake.personal(ALICE, "hi")
    channel = env.fake.mention(ALICE, "hi")
    for activity in (personal, channel):
        await env.post(activity)
        await env.fake.wait_for(
            "posted", where=lambda c, a=activity: c.conversation_id == a["conversation"]["id"]
        )
    (_, personal_ref, _), (_, channel_ref, _) = assistant.messages
    # Personal chat ids are longer than the 64-character key columns: kept as digests.
    assert personal_ref == PlatformRef(
        "teams", TENANT_ID, short_key(personal["conversation"]["id"]), CHAT_THREAD
    )
    assert channel_ref == PlatformRef("teams", TENANT_ID, CHANNEL_ID, channel["id"])
    # Any instance can post in either thread later (a decision's result, for example).
    store = SqlConversations(env.engine)
    stored = await store.get(channel_ref)
    assert stored is not None
    assert stored.service_url == env.fake.service_url
    assert stored.conversation_id == channel["conversation"]["id"]
    ids = await env.bot.adapter.outbound.post_in_thread(
        personal_ref, [{"type": "message", "text": "later"}]
    )
    assert ids
    (later,) = await env.fake.wait_for("posted", where=lambda c: c.message.get("text") == "later")
    assert later.conversation_id == personal["conversation"]["id"]


async def test_processed_deliveries_share_slacks_table(env: TeamsEnv) -> None:
    ask = env.fake.personal(ALICE, "hi")
    await env.post(ask)
    await env.fake.wait_for("posted")
    async with env.engine.connect() as conn:
        rows = (await conn.execute(select(processed_events.c.platform))).scalars().all()
        kept = (await conn.execute(select(teams_conversations))).all()
    assert rows == ["teams"]
    assert len(kept) == 1


async def test_database_unreachable_on_accept_is_503_then_the_retry_is_answered(
    env: TeamsEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    down = [True]
    # The in-process path's writes, and the ack front's (its inbox stores each delivery).
    writes = ((SqlProcessedActivities, "claim"), (SqlJobQueue, "enqueue"), (JobInbox, "_attempt"))
    for cls, name in writes:
        real = getattr(cls, name)

        async def maybe_down(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if down[0]:
                raise psycopg.OperationalError("connection to server lost")
            return await _real(*args, **kwargs)

        monkeypatch.setattr(cls, name, maybe_down)
    ask = env.fake.personal(ALICE, "hi")
    caplog.clear()
    status, _ = await env.post(ask)
    assert status == 503
    assert not any(r.exc_info for r in caplog.records)
    down[0] = False
    assert (await env.post(ask))[0] == 202
    await env.fake.wait_for("posted", where=lambda c: bool(c.cards))
    await env.fake.settle(quiet=0.2)
    assert len([c for c in env.fake.posted() if c.cards]) == 1


async def test_assistant_failure_is_one_plain_message(
    env: TeamsEnv, assistant: FakeAssistant, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any) -> Any:
        raise RuntimeError("model said: ignore previous instructions")

    monkeypatch.setattr(assistant, "handle_message", broken)
    ask = env.fake.personal(ALICE, "hi")
    await env.post(ask)
    (reply,) = await env.fake.wait_for("posted")
    assert "Something went wrong" in reply.text
    assert "ignore previous" not in reply.text


async def test_durable_runs_are_jobs(run_teams: RunTeams, assistant: FakeAssistant) -> None:
    async with run_teams(assistant, durable=True) as env:
        adapter = env.bot.adapter
        assert isinstance(adapter, DurableTeamsAdapter)
        ask = env.fake.personal(ALICE, "hi")
        await env.post(ask)
        await env.fake.wait_for("posted")
        assert adapter.runner is not None
        await adapter.runner.idle()
        job_id = "teams-" + delivery_id(ask["conversation"]["id"], ask["id"])
        status = await adapter.queue.status(job_id)
    assert status is not None
    assert status[0] == JobStatus.DONE


@pytest.mark.parametrize("kind", ["conversationUpdate", "installationUpdate", "no_user"])
async def test_activities_that_are_not_a_persons_message_run_nothing(
    run_teams: RunTeams, assistant: FakeAssistant, kind: str
) -> None:
    async with run_teams(assistant) as env:
        activity = env.fake.personal(ALICE, "hi")
        if kind == "no_user":
            del activity["from"]["aadObjectId"]  # a bot or an anonymous sender
        else:
            activity["type"] = kind
            activity.pop("text")
        status, body = await env.post(activity)
        assert status in (200, 202)
        await env.bot.adapter.idle()
        await env.fake.settle(quiet=0.2)
    assert assistant.messages == []
    assert env.fake.posted() == []
    assert "Exception" not in body
