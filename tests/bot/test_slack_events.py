"""Mentions, DMs, duplicates, signatures, unlinked users, threads, /ops, App Home — all over
HTTP against the running app and the fake Slack Web API."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import text

from testing.fake_assistant import FakeAssistant
from testing.slack import (
    BOT_ID,
    BOT_USER_ID,
    SlackSender,
    direct_message,
    mention,
)
from tests.bot.conftest import ALICE, BOB, DAVE, ERIN, RunApp, SlackEnv


def _texts(blocks: list[dict]) -> str:
    parts: list[str] = []
    for block in blocks:
        if "text" in block and isinstance(block["text"], dict):
            parts.append(block["text"].get("text", ""))
        for element in block.get("elements", []) + block.get("fields", []):
            if isinstance(element, dict) and "text" in element:
                text = element["text"]
                parts.append(text if isinstance(text, str) else text.get("text", ""))
    return "\n".join(parts)


async def test_mention_is_answered_in_its_thread_with_source_links(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    status, body = await env.sender.post_event(
        mention(ALICE.user_id, "is PAY-1 open?", channel="C0GENERAL", ts="1700000001.000100")
    )
    assert (status, body) == (200, "")
    updates = await env.fake.wait_for("chat.update")
    # Placeholder first (a channel thread is not an assistant thread), then replaced in place.
    placeholder = env.fake.calls_to("chat.postMessage")[0]
    assert placeholder["thread_ts"] == "1700000001.000100"
    assert placeholder["text"] == "Working on it…"
    answer = _texts(updates[0]["blocks"])
    assert "PAY-1 is open" in answer
    assert "<http://tickets.test/PAY-1|ticketing PAY-1>" in answer
    assert "Ticket data may be a minute old." in answer
    # The mention markup never reaches the core; the thread is (team, channel, thread_ts).
    user, ref, text = fake_assistant.messages[0]
    assert (user, text) == (ALICE, "is PAY-1 open?")
    assert (ref.team_id, ref.channel_id, ref.thread_ts) == (
        "T0SANDBOX",
        "C0GENERAL",
        "1700000001.000100",
    )


async def test_direct_message_is_answered_with_assistant_status(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    status, _ = await env.sender.post_event(direct_message(ALICE.user_id, "open tickets?"))
    assert status == 200
    answers = await env.fake.wait_for("chat.postMessage")
    statuses = env.fake.calls_to("assistant.threads.setStatus")
    assert statuses[0]["status"] == "is working on it…"
    assert answers[0]["channel"] == "D0ALICE"
    assert "PAY-1 is open" in _texts(answers[0]["blocks"])
    assert fake_assistant.messages[0][0] == ALICE


async def test_duplicate_delivery_is_answered_once(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    event = mention(ALICE.user_id, "status?", ts="1700000002.000100")
    first = await env.sender.post_event(event, event_id="EvDUP1")
    retries = await asyncio.gather(
        *(env.sender.post_event(event, event_id="EvDUP1", retry_num=n) for n in (1, 2, 3))
    )
    assert first == (200, "")
    assert all(r == (200, "") for r in retries)
    await env.fake.wait_for("chat.update")
    await env.fake.settle()
    assert len(fake_assistant.messages) == 1
    assert len(env.fake.calls_to("chat.update")) == 1


async def test_forged_or_stale_signature_is_refused_and_nothing_runs(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    event = mention(ALICE.user_id, "close everything")
    started = len(env.fake.calls)  # auth.test at start-up: which workspace the token is
    forged = await env.sender.post_event(event, signature_override="v0=" + "0" * 64)
    stale = await env.sender.post_event(event, timestamp=int(time.time()) - 6 * 60)
    wrong_secret = await env.sender.__class__(env.url, signing_secret="guess").post_event(event)
    assert forged[0] == 401
    assert stale[0] == 401
    assert wrong_secret[0] == 401
    await asyncio.sleep(0.3)
    assert fake_assistant.messages == []
    assert [c.method for c in env.fake.calls[started:]] == []


async def test_unlinked_user_gets_an_ephemeral_connect_button(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    await env.sender.post_event(mention(ERIN.user_id, "what is PAY-1?", ts="1700000003.0001"))
    ephemeral = (await env.fake.wait_for("chat.postEphemeral"))[0]
    assert ephemeral["user"] == ERIN.user_id
    button = ephemeral["blocks"][1]["elements"][0]
    assert button["url"] == "http://idp.test/link/start?user=U0ERIN"
    assert button["text"]["text"] == "Connect your account"
    # The placeholder does not linger and nothing is posted publicly.
    await env.fake.wait_for("chat.delete")
    assert env.fake.thread("C0GENERAL", "1700000003.0001") == []


async def test_another_user_never_continues_the_owners_thread(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    root = "1700000004.000100"
    await env.sender.post_event(mention(ALICE.user_id, "my question", ts=root))
    await env.fake.wait_for("chat.update")
    await env.sender.post_event(
        mention(DAVE.user_id, "and mine", ts="1700000004.000200", thread_ts=root)
    )
    refusal = (await env.fake.wait_for("chat.update", 2))[1]
    assert refusal["ts"] != env.fake.calls_to("chat.update")[0]["ts"]
    assert "belongs to someone else" in _texts(refusal["blocks"])
    thread = await fake_assistant.threads.get_or_create(fake_assistant.messages[1][1], "dave")
    assert thread.owner_subject == "alice"


async def test_bot_messages_edits_and_other_teams_are_ignored(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    await env.sender.post_event(direct_message(BOT_USER_ID, "echo", bot_id=BOT_ID))
    await env.sender.post_event(direct_message(ALICE.user_id, "edited", subtype="message_changed"))
    await env.sender.post_event(direct_message("U0OTHER", "hi", team="T0OTHER"))
    await env.sender.post_event(mention("U0GUEST", "hi", team="T0GUEST"))
    await asyncio.sleep(0.5)
    assert fake_assistant.messages == []
    assert [c.method for c in env.fake.calls if c.method != "auth.test"] == []


async def test_configured_other_team_is_served(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    guest = type(ALICE)("slack", "T0PARTNER", "U0GUEST")
    fake_assistant.link(guest, "guest")
    async with run_app(fake_assistant, allowed_team_ids=frozenset({"T0PARTNER"})) as env:
        await env.sender.post_event(mention("U0GUEST", "hi", team="T0PARTNER"))
        await env.fake.wait_for("chat.update")
    assert fake_assistant.messages[0][0] == guest


async def test_long_answer_is_split_within_slack_limits(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    await env.sender.post_event(direct_message(ALICE.user_id, "long please"))
    posted = await env.fake.wait_for("chat.postMessage")
    await env.fake.settle()
    posted = env.fake.calls_to("chat.postMessage")
    text = "".join(_texts(p["blocks"]) for p in posted)
    assert "Paragraph 39" in text
    for message in posted:
        assert len(message["blocks"]) <= 50
        for block in message["blocks"]:
            if block["type"] == "section":
                assert len(block["text"]["text"]) <= 3000
    assert sum(len(p["blocks"]) for p in posted) > 1


async def test_failure_in_the_core_is_reported_not_crashed(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    async def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("db down")

    fake_assistant.handle_message = boom  # type: ignore[method-assign,assignment]
    await env.sender.post_event(mention(ALICE.user_id, "hi"))
    update = (await env.fake.wait_for("chat.update"))[0]
    assert "Nothing was changed" in _texts(update["blocks"])
    assert "db down" not in _texts(update["blocks"])


async def test_ops_command_link_unlink_status_and_ask(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    status, body = await env.sender.post_command("link", user=ERIN.user_id)
    assert status == 200
    assert "http://idp.test/link/start?user=U0ERIN" in body
    status, body = await env.sender.post_command("status", user=ALICE.user_id)
    assert "alice@example.com" in body
    status, body = await env.sender.post_command("", user=ALICE.user_id)
    assert "/ops link" in body
    status, body = await env.sender.post_command("ask is PAY-1 open?", user=ALICE.user_id)
    assert status == 200
    await env.fake.wait_for("chat.update")
    question = env.fake.calls_to("chat.postMessage")[0]
    assert question["text"] == "<@U0ALICE> asked: is PAY-1 open?"
    assert fake_assistant.messages[0][2] == "is PAY-1 open?"
    status, body = await env.sender.post_command("unlink", user=ALICE.user_id)
    assert "disconnected" in body
    assert (await fake_assistant.status(ALICE)).linked is False


async def test_app_home_shows_identity_requests_and_approvals(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    await env.sender.post_event(mention(ALICE.user_id, "update PAY-1 status=closed"))
    await env.fake.wait_for("chat.postMessage", where=lambda p: p["channel"] == "ops-approvals")
    await env.fake.settle()  # the new approval republished the Homes concerned
    base = len(env.fake.calls_to("views.publish"))
    home = {
        "type": "app_home_opened",
        "tab": "home",
        "channel": "D0BOB",
        "user": BOB.user_id,
        "event_ts": "1.0",
    }
    await env.sender.post_event(home)
    view = (await env.fake.wait_for("views.publish", base + 1))[base]
    assert view["user_id"] == BOB.user_id
    text = _texts(view["view"]["blocks"])
    assert "bob@example.com" in text
    assert "Waiting for your decision" in text
    assert "ticketing_update_ticket" in text
    await env.sender.post_event({**home, "user": ALICE.user_id, "channel": "D0ALICE"})
    alice_view = (await env.fake.wait_for("views.publish", base + 2))[base + 1]
    alice_text = _texts(alice_view["view"]["blocks"])
    assert "Your requests" in alice_text
    assert "ticketing_update_ticket" in alice_text
    assert "Waiting for your decision" not in alice_text
    await env.sender.post_event({**home, "user": ERIN.user_id, "channel": "D0ERIN"})
    erin_view = (await env.fake.wait_for("views.publish", base + 3))[base + 2]
    assert "*not connected*" in _texts(erin_view["view"]["blocks"])
    assert _texts(erin_view["view"]["blocks"]).count("Connect your account") == 1
    assert "Your requests" not in _texts(erin_view["view"]["blocks"])
    await env.sender.post_event({**home, "tab": "messages", "user": ALICE.user_id})
    prompts = (await env.fake.wait_for("assistant.threads.setSuggestedPrompts"))[0]
    assert prompts["channel_id"] == "D0BOB"
    assert len(prompts["prompts"]) == 3


async def test_rate_limited_and_failing_web_api_calls_are_retried(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    env.fake.fail_next("chat.postMessage", 429, retry_after=0)
    env.fake.fail_next("chat.update", 503)
    await env.sender.post_event(mention(ALICE.user_id, "retry me"))
    await env.fake.wait_for("chat.update", 2)
    statuses = [c.method for c in env.fake.calls]
    assert statuses.count("chat.postMessage") == 2
    final = env.fake.thread("C0GENERAL", "1700000000.000100")
    assert "PAY-1 is open" in _texts(final[0]["blocks"])
    assert fake_assistant.messages[0][0] == ALICE


async def test_placeholder_failure_still_delivers_the_answer(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    env.fake.fail_next("chat.postMessage", 200, error="msg_too_long")
    await env.sender.post_event(mention(ALICE.user_id, "hello", ts="1700000500.0001"))
    answers = await env.fake.wait_for("chat.postMessage", 2)
    assert "PAY-1 is open" in _texts(answers[1]["blocks"])
    assert env.fake.calls_to("chat.update") == []


async def test_ops_command_from_another_workspace_is_refused(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    guest = SlackSender(env.url, team_id="T0GUEST")
    status, body = await guest.post_command("ask is PAY-1 open?", user="U0GUEST")
    assert status == 200
    assert "not available to your workspace" in body
    await asyncio.sleep(0.3)
    assert fake_assistant.messages == []


async def test_ops_ask_where_the_bot_cannot_post_answers_through_the_response_url(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    env.fake.fail_next("chat.postMessage", 200, error="not_in_channel")
    status, _ = await env.sender.post_command(
        "ask is PAY-1 open?",
        user=ALICE.user_id,
        channel="C0SECRET",
        response_url=env.fake.response_url,
    )
    assert status == 200
    reply = (await env.fake.wait_for("response_url"))[0]
    assert reply["response_type"] == "ephemeral"
    assert "/invite @opsbot" in reply["text"]
    assert fake_assistant.messages == []


@pytest.mark.parametrize("run_app", ["durable"], indirect=True)
async def test_ops_ask_that_cannot_be_stored_says_so_in_the_ack(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    """Slack never resends a command: if the question cannot be stored, the user is told at
    once (and nothing half-runs); once the database is back, asking again works."""
    async with env.engine.begin() as conn:
        await conn.execute(text("ALTER TABLE run_jobs RENAME TO run_jobs_away"))
    status, body = await env.sender.post_command("ask is PAY-1 open?", user=ALICE.user_id)
    assert status == 200
    assert "can't take requests right now" in body
    assert env.fake.calls_to("chat.postMessage") == []
    async with env.engine.begin() as conn:
        await conn.execute(text("ALTER TABLE run_jobs_away RENAME TO run_jobs"))
    status, body = await env.sender.post_command("ask is PAY-1 open?", user=ALICE.user_id)
    assert "On it" in body
    await env.fake.wait_for("chat.update")
    assert [question for _, _, question in fake_assistant.messages] == ["is PAY-1 open?"]
