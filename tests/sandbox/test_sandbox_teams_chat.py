"""The sandbox's Teams side (``sandbox.teams_chat``) over real HTTP, with a recording stand-in for
the Teams app: what reaches the bot (a personal message; in a channel only an @opsbot post),
where replies show (the post's thread), the typing indicator, and clear errors for bad input."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from infra.serving import bind_socket, socket_url
from sandbox.emulator import InputError
from sandbox.teams_chat import TeamsChat
from testing.slack_workspace import User
from testing.teams import CHANNEL_ID, FakeTeams, running_fake_teams

CARD_TYPE = "application/vnd.microsoft.card.adaptive"

PEOPLE = {
    "alice": User("UALICE", "alice", "Alice Anders", "alice@example.com", ("team-payments",)),
    "bob": User("UBOB", "bob", "Bob Brandt", "bob@example.com", ("ticket-leads",)),
}


@contextlib.asynccontextmanager
async def stand_in_app(
    answer: Callable[[dict[str, Any]], web.Response],
) -> AsyncIterator[str]:
    """A stand-in for the Teams app on a loopback port: ``answer`` gives the reply to each
    activity POSTed to /api/messages. Yields its base URL."""

    async def messages(request: web.Request) -> web.Response:
        return answer(await request.json())

    application = web.Application()
    application.router.add_post("/api/messages", messages)
    runner = web.AppRunner(application)
    await runner.setup()
    sock = bind_socket()
    await web.SockSite(runner, sock).start()
    try:
        yield socket_url(sock)
    finally:
        await runner.cleanup()


@pytest.fixture
async def app() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in for the Teams app: records each activity POSTed to /api/messages."""
    received: list[dict[str, Any]] = []

    def record(activity: dict[str, Any]) -> web.Response:
        received.append(activity)
        return web.Response(status=202)

    async with stand_in_app(record) as url:
        yield url, received


@pytest.fixture
async def fake() -> AsyncIterator[FakeTeams]:
    async with running_fake_teams() as running:
        yield running


async def bot_posts(fake: FakeTeams, conversation: str, activity: dict[str, Any]) -> str:
    """What the bot would do: a Connector call with its outbound token."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{fake.url}/v3/conversations/{conversation}/activities",
            data=json.dumps(activity),
            headers={
                "Authorization": f"Bearer {fake.connector_token}",
                "Content-Type": "application/json",
            },
        ) as reply,
    ):
        assert reply.status == 201
        posted: dict[str, Any] = await reply.json()
        return str(posted["id"])


async def test_only_an_at_mention_in_a_channel_reaches_the_bot(
    fake: FakeTeams, app: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = app
    chat = TeamsChat(fake, PEOPLE, url)
    chat.say("alice", "general", "lunch anyone?", None)
    chat.say("alice", "general", "@opsbot show PAY-1", None)
    chat.say("bob", "chat", "hello", None)
    await chat.idle()
    kinds = [(a["conversation"]["conversationType"], a["text"]) for a in received]
    assert sorted(kinds) == [("channel", "<at>opsbot</at> show PAY-1"), ("personal", "hello")]
    general = (await chat.state("alice"))["messages"]["general"]
    assert [m["text"] for m in general] == ["lunch anyone?", "@opsbot show PAY-1"]
    # bob's personal chat is his own
    assert (await chat.state("alice"))["messages"]["chat"] == []


async def test_a_reply_shows_in_the_posts_thread_and_typing_until_it_comes(
    fake: FakeTeams, app: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = app
    chat = TeamsChat(fake, PEOPLE, url)
    chat.say("alice", "general", "@opsbot show PAY-1", None)
    await chat.idle()
    (mention,) = received
    thread = mention["conversation"]["id"]
    await bot_posts(fake, thread, {"type": "typing"})
    assert (await chat.state("bob"))["typing"] == ["general"]
    reply_id = await bot_posts(fake, thread, {"type": "message", "text": "PAY-1 is open"})
    state = await chat.state("bob")
    assert state["typing"] == []
    (post, reply) = state["messages"]["general"]
    assert reply["id"] == reply_id
    assert reply["root"] == post["id"] == mention["id"]
    assert thread == f"{CHANNEL_ID};messageid={mention['id']}"


async def test_bad_input_is_a_clear_error(
    fake: FakeTeams, app: tuple[str, list[dict[str, Any]]]
) -> None:
    chat = TeamsChat(fake, PEOPLE, app[0])
    with pytest.raises(InputError, match="unknown user"):
        await chat.state("mallory")
    with pytest.raises(InputError, match="unknown conversation"):
        chat.say("alice", "random", "hi", None)
    with pytest.raises(InputError, match="text is required"):
        chat.say("alice", "chat", "   ", None)
    # a 1 MB message went to the app, which refused its size: the person saw no answer
    with pytest.raises(InputError, match="at most 28,000 characters"):
        chat.say("alice", "chat", "x" * 28_001, None)
    with pytest.raises(InputError, match="no message"):
        await chat.click("alice", f"{CHANNEL_ID}|42", "approve", {})


async def _post_approval_card(fake: FakeTeams) -> None:
    """The bot posts an approval card in ops-approvals that asks Teams to refresh it for bob."""
    from sandbox.teams_chat import teams_user
    from testing.teams import APPROVALS_CHANNEL_ID

    bob = teams_user(PEOPLE["bob"])
    posted = {
        "type": "AdaptiveCard",
        "version": "1.5",
        "body": [{"type": "TextBlock", "text": "Approval needed"}],
        "refresh": {
            "userIds": [bob.mri],
            "action": {"type": "Action.Execute", "verb": "approval.view", "data": {}},
        },
    }
    attachment = {"contentType": CARD_TYPE, "content": posted}
    await bot_posts(fake, APPROVALS_CHANNEL_ID, {"type": "message", "attachments": [attachment]})


async def test_a_card_refresh_the_app_could_not_answer_is_asked_again(
    fake: FakeTeams,
) -> None:
    """Teams asks for an approver's view of a card when it shows it. The app refuses one it
    has not yet recorded (its post still in flight): the next look asks again and shows the
    buttons, instead of keeping the read-only card until the card changes."""
    refreshes: list[dict[str, Any]] = []

    def answer(activity: dict[str, Any]) -> web.Response:
        refreshes.append(activity)
        if len(refreshes) == 1:  # what the app answers before the card's location is saved
            value = {"code": "BadRequest", "message": "This card is not an approval."}
            body = {"statusCode": 400, "type": "application/vnd.microsoft.error", "value": value}
        else:
            card = {
                "type": "AdaptiveCard",
                "version": "1.5",
                "body": [],
                "actions": [{"type": "Action.Execute", "title": "Approve", "verb": "approve"}],
            }
            body = {"statusCode": 200, "type": CARD_TYPE, "value": card}
        return web.json_response(body)

    async with stand_in_app(answer) as url:
        chat = TeamsChat(fake, PEOPLE, url)
        await _post_approval_card(fake)
        first = json.dumps((await chat.state("bob"))["messages"]["approvals"])
        assert '"Approve"' not in first  # the card as posted
        second = json.dumps((await chat.state("bob"))["messages"]["approvals"])
        assert '"Approve"' in second
        third = json.dumps((await chat.state("bob"))["messages"]["approvals"])
        assert third == second
        assert len(refreshes) == 2  # an answered refresh is kept


async def test_an_invoke_answered_with_json_that_is_not_an_object_is_shown_as_such(
    fake: FakeTeams,
) -> None:
    """A JSON list, string or null as the app's answer to a card's refresh was a 500 on the
    page (``answer.get`` on a list); the card stays as posted."""
    async with stand_in_app(lambda _activity: web.json_response([1, 2])) as url:
        chat = TeamsChat(fake, PEOPLE, url)
        await _post_approval_card(fake)
        shown = json.dumps((await chat.state("bob"))["messages"]["approvals"])
        assert "Approval needed" in shown
