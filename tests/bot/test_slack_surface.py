"""The agent messaging surface and Slack's standardized app authentication, over HTTP with
the fake Slack (which checks the arguments Slack documents for each method).

- a new conversation in the Messages tab gets a title from the question; replies in it and
  channel @mentions do not retitle anything, and @mentions are still answered;
- opening the Messages tab sets the suggested prompts;
- with ``user_connections`` on: ``user_connection`` connect opens Slack's connect modal with
  opsbot's own login URL, status requests and disconnects are answered with
  ``apps.user.connection.update``, and connect prompts use the ``auth_provider`` block;
  with it off, the events are ignored and the Connect button stays.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.slack.listeners import thread_title
from testing.fake_assistant import FakeAssistant
from testing.slack import direct_message, mention
from tests.bot.conftest import ALICE, BOB, ERIN, RunApp, SlackEnv

in_process_only = pytest.mark.parametrize("run_app", ["in_process"], indirect=True)


def test_thread_title_is_the_question_cut_at_a_word() -> None:
    assert thread_title("  is PAY-102\n still open? ") == "is PAY-102 still open?"
    long = "which incident tickets are open for the payments team and who owns each of them"
    title = thread_title(long)
    assert title.endswith("…")
    assert len(title) <= 61
    assert long.startswith(title[:-1])
    assert thread_title("") == "Question for opsbot"


async def test_a_new_dm_conversation_gets_a_title_and_the_messages_tab_prompts(
    env: SlackEnv,
) -> None:
    await env.sender.post_event(
        direct_message(ALICE.user_id, "is PAY-1 still open?", ts="1700000500.0001")
    )
    titles = await env.fake.wait_for("assistant.threads.setTitle")
    assert titles[0]["channel_id"] == "D0ALICE"
    assert titles[0]["thread_ts"] == "1700000500.0001"
    assert titles[0]["title"] == "is PAY-1 still open?"
    # a reply in that thread is answered, and the title stays
    await env.sender.post_event(
        direct_message(
            ALICE.user_id, "and PAY-2?", ts="1700000500.0009", thread_ts="1700000500.0001"
        )
    )
    # an @mention in a channel is still answered, and no channel thread gets a title
    await env.sender.post_event(mention(ALICE.user_id, "show PAY-3", ts="1700000600.0001"))
    await env.fake.wait_for(
        "chat.update", where=lambda p: p["channel"] != "D0ALICE" and "PAY-3" in str(p)
    )
    await env.fake.settle()
    assert len(env.fake.calls_to("assistant.threads.setTitle")) == 1

    opened = {"type": "app_home_opened", "tab": "messages", "user": BOB.user_id, "channel": "D0BOB"}
    await env.sender.post_event(opened)
    prompts = await env.fake.wait_for("assistant.threads.setSuggestedPrompts")
    assert prompts[0]["channel_id"] == "D0BOB"
    # the fake accepts only what Slack does: 1-4 prompts, each with a title and a message
    assert env.fake.answers_to("assistant.threads.setSuggestedPrompts") == [{"ok": True}]


def _connection_event(user: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "user": user, "event_ts": "1764264284.841251", **extra}


def _provider(params: dict[str, Any]) -> dict[str, Any]:
    provider = params["primary_provider"]
    parsed: dict[str, Any] = json.loads(provider) if isinstance(provider, str) else provider
    return parsed


@in_process_only
async def test_standardized_app_authentication_links_with_opsbots_own_login(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    async with run_app(fake_assistant, user_connections=True) as env:
        # Slack asks whether people are connected: the core's answer is reported
        for user in (ALICE.user_id, ERIN.user_id):
            await env.sender.post_event(_connection_event(user, "user_connection_status_requested"))
        await env.fake.wait_for("apps.user.connection.update", 2)
        assert env.fake.user_connections == {"U0ALICE": "connected", "U0ERIN": "disconnected"}

        # erin clicks Connect in Slack: the connect modal opens opsbot's login
        await env.sender.post_event(
            _connection_event(
                ERIN.user_id, "user_connection", subtype="connect", trigger_id="12.34.ab"
            )
        )
        (request,) = await env.fake.wait_for("apps.user.connection.requestAuth")
        assert request["trigger_id"] == "12.34.ab"
        provider = _provider(request)
        assert provider["auth_url"] == await fake_assistant.link_url(ERIN)
        assert provider["is_connected"] is False
        assert env.fake.answers_to("apps.user.connection.requestAuth") == [{"ok": True}]

        # a prompt to connect is Slack's auth_provider block, opening the same login
        await env.sender.post_event(mention(ERIN.user_id, "show PAY-1", ts="1700000700.0001"))
        (prompt,) = await env.fake.wait_for("chat.postEphemeral")
        assert prompt["user"] == ERIN.user_id
        blocks = (
            prompt["blocks"] if isinstance(prompt["blocks"], list) else json.loads(prompt["blocks"])
        )
        auth = [b for b in blocks if b["type"] == "auth_provider"]
        assert len(auth) == 1
        assert auth[0]["auth_url"] == await fake_assistant.link_url(ERIN)
        assert not [b for b in blocks if b["type"] == "actions"]

        # alice disconnects in Slack: unlinked in opsbot, reported, her Home republished
        await env.sender.post_event(
            _connection_event(ALICE.user_id, "user_connection", subtype="disconnect")
        )
        await env.fake.wait_for("views.publish", where=lambda p: p["user_id"] == ALICE.user_id)
        assert (await fake_assistant.status(ALICE)).linked is False
        assert env.fake.user_connections["U0ALICE"] == "disconnected"

        # /ops unlink reports it too
        await env.sender.post_command("unlink", user=BOB.user_id)
        await env.fake.wait_for(
            "apps.user.connection.update", where=lambda p: p["user_id"] == BOB.user_id
        )
        assert env.fake.user_connections["U0BOB"] == "disconnected"


@in_process_only
async def test_without_the_setting_the_events_are_ignored_and_the_button_stays(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    status, _ = await env.sender.post_event(
        _connection_event(ALICE.user_id, "user_connection", subtype="disconnect")
    )
    assert status == 200
    await env.sender.post_event(_connection_event(ERIN.user_id, "user_connection_status_requested"))
    await env.sender.post_event(mention(ERIN.user_id, "show PAY-1", ts="1700000800.0001"))
    (prompt,) = await env.fake.wait_for("chat.postEphemeral")
    await env.fake.settle()
    blocks = (
        prompt["blocks"] if isinstance(prompt["blocks"], list) else json.loads(prompt["blocks"])
    )
    assert [b["type"] for b in blocks] == ["section", "actions"]
    assert (await fake_assistant.status(ALICE)).linked is True
    assert env.fake.calls_to("apps.user.connection.update") == []
    assert env.fake.calls_to("apps.user.connection.requestAuth") == []
