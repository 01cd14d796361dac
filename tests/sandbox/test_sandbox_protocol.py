"""The emulator speaks Slack's protocol: Bolt accepts its signed events, commands and clicks
(and refuses a wrong signature), and ``slack_sdk``'s own client gets Slack's answers from the
Web API subset the bot uses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from sandbox import AppDelivery
from sandbox.delivery import new_event_id
from tests.sandbox.harness import BOT_TOKEN, SECRET, Harness


async def test_bolt_accepts_signed_events_commands_and_clicks(harness: Harness) -> None:
    ts = harness.emulator.say("UALICE", "C0OPS", "@opsbot hello")
    await harness.emulator.idle()
    (envelope,) = harness.received
    assert envelope["type"] == "event_callback"
    assert envelope["event_id"].startswith("Ev")
    assert envelope["event"]["type"] == "app_mention"
    assert envelope["event"]["text"] == "<@U0OPSBOT> hello"
    assert envelope["event"]["ts"] == ts

    harness.emulator.say("UALICE", "C0OPS", "/ops status please")
    await harness.emulator.idle()
    assert harness.received[-1]["text"] == "status please"
    reply = harness.emulator.state("UALICE")["messages"][-1]
    assert (reply["text"], reply["ephemeral"]) == ("you said status please", True)
    assert all(
        m["text"] != "you said status please" for m in harness.emulator.state("UBOB")["messages"]
    )

    posted = await harness.client.chat_postMessage(
        channel="ops",
        text="card",
        blocks=[
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "go",
                        "value": "v1",
                        "text": {"type": "plain_text", "text": "Go"},
                    }
                ],
            }
        ],
    )
    harness.emulator.click_message("UBOB", "C0OPS", posted["ts"], 0, 0)
    await harness.emulator.idle()
    click = harness.received[-1]
    assert click["type"] == "block_actions"
    assert click["user"]["id"] == "UBOB"
    assert click["actions"][0]["value"] == "v1"
    assert click["container"]["message_ts"] == posted["ts"]


async def test_a_wrong_signature_or_stale_timestamp_is_refused(harness: Harness) -> None:
    event = {
        "type": "app_mention",
        "user": "UALICE",
        "text": "<@U0OPSBOT> hi",
        "ts": "1.0",
        "channel": "C0OPS",
    }
    good = await harness.delivery().event(event, new_event_id())
    assert good.status == 200
    forged = await harness.delivery("not-the-secret").event(event, new_event_id())
    assert forged.status == 401
    stale = AppDelivery(
        f"{harness.app_url}/slack/events", SECRET, harness.http, clock=lambda: 1_000_000_000.0
    )
    assert (await stale.event(event, new_event_id())).status == 401
    assert len(harness.received) == 1


async def test_web_api_subset_answers_as_slack_does(harness: Harness) -> None:
    client, ws = harness.client, harness.emulator.workspace
    me = await client.auth_test()
    assert (me["user_id"], me["team_id"], me["bot_id"]) == ("U0OPSBOT", "T0SANDBOX", "B0OPSBOT")

    card = await client.chat_postMessage(channel="ops-approvals", text="a card")
    assert card["channel"] == "C0APPROVALS"
    dm = await client.chat_postMessage(channel="UALICE", text="psst")
    assert dm["channel"] == "DALICE"
    reply = await client.chat_postMessage(channel="C0APPROVALS", thread_ts=card["ts"], text="r")
    assert ws.message("C0APPROVALS", reply["ts"]).thread_ts == card["ts"]
    await client.chat_update(channel="C0APPROVALS", ts=card["ts"], text="decided", blocks=[])
    assert ws.message("C0APPROVALS", card["ts"]).text == "decided"
    await client.chat_delete(channel="C0APPROVALS", ts=reply["ts"])
    with pytest.raises(SlackApiError) as missing:
        await client.chat_update(channel="C0APPROVALS", ts=reply["ts"], text="x")
    assert missing.value.response["error"] == "message_not_found"

    await client.chat_postEphemeral(channel="C0OPS", user="UBOB", text="only bob")

    def in_ops(user: str) -> list[str]:
        return [
            m["text"] for m in harness.emulator.state(user)["messages"] if m["channel"] == "C0OPS"
        ]

    assert in_ops("UBOB") == ["only bob"]
    assert in_ops("UALICE") == []

    trigger = ws.new_trigger("UBOB")
    view = {"type": "modal", "title": {"type": "plain_text", "text": "T"}, "blocks": []}
    opened = await client.views_open(trigger_id=trigger, view=view)
    assert harness.emulator.state("UBOB")["modal"]["id"] == opened["view"]["id"]
    with pytest.raises(SlackApiError) as reused:
        await client.views_open(trigger_id=trigger, view=view)  # a trigger works once
    assert reused.value.response["error"] == "invalid_trigger_id"
    await client.views_update(
        view_id=opened["view"]["id"], view={**view, "title": {"type": "plain_text", "text": "U"}}
    )
    assert harness.emulator.state("UBOB")["modal"]["view"]["title"]["text"] == "U"
    await client.views_publish(user_id="UALICE", view={"type": "home", "blocks": []})
    assert harness.emulator.state("UALICE")["home"] == {"type": "home", "blocks": []}

    user = await client.users_info(user="UALICE")
    assert user["user"]["profile"]["email"] == "alice@example.com"
    info = await client.conversations_info(channel="C0OPS")
    assert info["channel"]["name"] == "ops"

    await client.assistant_threads_setStatus(
        channel_id="DALICE", thread_ts=dm["ts"], status="is thinking"
    )
    assert harness.emulator.state("UALICE")["statuses"][0]["status"] == "is thinking"
    with pytest.raises(SlackApiError) as not_assistant:
        await client.assistant_threads_setStatus(channel_id="C0OPS", thread_ts="1.0", status="x")
    assert not_assistant.value.response["error"] == "channel_not_found"

    too_many = [{"type": "divider"}] * 51
    with pytest.raises(SlackApiError) as limit:
        await client.chat_postMessage(channel="ops", text="x", blocks=too_many)
    assert limit.value.response["error"] == "invalid_blocks"
    stranger = AsyncWebClient(token="xoxb-wrong", base_url=client.base_url)
    with pytest.raises(SlackApiError) as auth:
        await stranger.auth_test()
    assert auth.value.response["error"] == "invalid_auth"


async def test_a_failed_event_is_redelivered_with_the_same_event_id(harness: Harness) -> None:
    seen: list[tuple[str, str | None]] = []
    original = harness.emulator.delivery.event

    async def flaky(event: dict[str, Any], event_id: str, retry_num: int = 0) -> Any:
        seen.append((event_id, str(retry_num)))
        if retry_num == 0:
            return await harness.delivery("wrong").event(event, event_id)  # → 401
        return await original(event, event_id, retry_num)

    harness.emulator.delivery.event = flaky  # type: ignore[method-assign]
    harness.emulator.say("UALICE", "C0OPS", "@opsbot again")
    await asyncio.wait_for(harness.emulator.idle(), 10)
    assert [n for _id, n in seen] == ["0", "1"]
    assert seen[0][0] == seen[1][0]
    assert harness.received[-1]["event_id"] == seen[0][0]


async def test_a_lone_surrogate_from_the_page_keeps_the_page_working(harness: Harness) -> None:
    """A browser's text box can hold a lone surrogate, and JSON carries it; UTF-8 cannot:
    ``/ui/state`` answered every later poll with a 500 and the page stopped updating."""
    body = b'{"user": "UALICE", "channel": "C0OPS", "text": "x\\ud800y"}'
    said = await harness.http.post(
        f"{harness.ui_url}/ui/say", content=body, headers={"Content-Type": "application/json"}
    )
    assert said.status_code == 200, said.text
    await harness.emulator.idle()
    state = await harness.http.get(f"{harness.ui_url}/ui/state", params={"user": "UALICE"})
    assert state.status_code == 200
    assert state.json()["messages"][-1]["text"] == "x\ud800y"
    # The Web API answers the app with it too (chat.postMessage echoes the message).
    posted = await harness.http.post(
        f"{harness.ui_url}/api/chat.postMessage",
        content=b'{"channel": "C0OPS", "text": "b\\udc00"}',
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {BOT_TOKEN}"},
    )
    assert posted.status_code == 200
    assert posted.json()["message"]["text"] == "b\udc00"


async def test_what_a_fuzz_of_the_page_found_gets_a_clear_answer(harness: Harness) -> None:
    """Each was a 500 with a traceback (or, for the long message, no answer at all)."""
    ui, api = f"{harness.ui_url}/ui", f"{harness.ui_url}/api"
    bot = {"Content-Type": "application/json", "Authorization": f"Bearer {BOT_TOKEN}"}
    # a "since" that str.isdigit() takes and int() does not
    for since in ("\u00b2", "9" * 5000):
        state = await harness.http.get(f"{ui}/state", params={"user": "UALICE", "since": since})
        assert state.status_code == 200
        assert "messages" in state.json()
    # JSON nested past Python's stack
    deep = b"[" * 100_000
    said = await harness.http.post(f"{ui}/say", content=deep)
    assert (said.status_code, said.json()["error"]) == (400, "the body is not JSON")
    posted = await harness.http.post(f"{api}/chat.postMessage", content=deep, headers=bot)
    assert posted.json() == {"ok": False, "error": "invalid_json"}
    # a token that is not ASCII
    for token in (rb"\u00e9", rb"\ud800"):  # as JSON escapes: httpx cannot encode the second
        authed = await harness.http.post(
            f"{api}/auth.test",
            content=b'{"token": "' + token + b'"}',
            headers={"Content-Type": "application/json"},
        )
        assert authed.json() == {"ok": False, "error": "invalid_auth"}
    # blocks of the wrong shapes: Slack's own answer
    for block in (
        {"type": "actions", "elements": [1]},
        {"type": "actions", "elements": 5},
        {"type": "section", "text": {"type": "mrkdwn", "text": 5}},
        {"type": "actions", "elements": [{"type": "button", "text": "s"}]},
        {"type": 7},
    ):
        posted = await harness.http.post(
            f"{api}/chat.postMessage", json={"channel": "C0OPS", "blocks": [block]}, headers=bot
        )
        assert posted.json() == {"ok": False, "error": "invalid_blocks"}, block
    # a message longer than Slack takes
    body = {"user": "UALICE", "channel": "C0OPS", "text": "x" * 40_001}
    said = await harness.http.post(f"{ui}/say", json=body)
    assert said.status_code == 400
    assert "at most 40,000 characters" in said.json()["error"]
