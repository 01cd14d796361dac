"""App Home: the user's servers and their connection status, their requests with state and
arguments, what waits for their decision (Approve from Home takes the card's decision path:
the card in the approvals channel is updated and the requester told), and Refresh."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from testing.fake_assistant import FakeAssistant
from testing.slack import APPROVALS_CHANNEL_ID, card_decided, home_action
from tests.bot.conftest import ALICE, BOB, ERIN, SlackEnv
from tests.bot.test_slack_approvals import _request_write
from tests.bot.test_slack_events import _texts
from tests.bot.test_slack_stop import until


def _home_opened(user: str) -> dict[str, Any]:
    return {"type": "app_home_opened", "tab": "home", "channel": f"D{user}", "user": user}


async def _published(env: SlackEnv, user: str, after: int) -> dict[str, Any]:
    calls = await env.fake.wait_for(
        "views.publish", after + 1, where=lambda p: p["user_id"] == user
    )
    view: dict[str, Any] = calls[after]["view"]
    return view


def _home_count(env: SlackEnv, user: str) -> int:
    return len([p for p in env.fake.calls_to("views.publish") if p["user_id"] == user])


def _actions(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]


class PublishRecorder:
    """The Web API's ``views.publish`` as a Home test needs it: each user id and view."""

    def __init__(self) -> None:
        self.views: list[dict[str, Any]] = []
        self.users: list[str] = []

    async def views_publish(self, *, user_id: str, view: dict[str, Any]) -> None:
        self.users.append(user_id)
        self.views.append(view)


def home_views(assistant: FakeAssistant, client: PublishRecorder | None = None) -> Any:
    """The Home part of the adapter alone, over ``assistant`` and ``client``."""
    from types import SimpleNamespace

    from bot.slack.homes import HomeViews

    return HomeViews(
        SimpleNamespace(user_connections=False),  # type: ignore[arg-type]
        assistant,
        client,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
    )


async def test_home_lists_servers_requests_and_waiting_with_refresh(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    fake_assistant.unreachable["docs"] = "not reachable as you right now"
    await _request_write(env)
    await env.fake.settle()
    base = _home_count(env, ALICE.user_id)
    await env.sender.post_event(_home_opened(ALICE.user_id))
    home = await _published(env, ALICE.user_id, base)
    text = _texts(home["blocks"])
    # servers, each with its status
    assert ":white_check_mark: `ticketing` — connected" in text
    assert ":warning: `docs` — not reachable as you right now" in text
    # her request: state, then what and with which arguments
    assert "*Your requests*" in text
    assert "waiting for an approver" in text
    assert "`ticketing_update_ticket` (ticket_id=PAY-1, status=closed)" in text
    # alice may not decide her own request: nothing waits for her, no decision buttons
    assert "Waiting for your decision" not in text
    assert [a["action_id"] for a in _actions(home)] == ["home_refresh"]

    # Refresh republishes her Home, asking again
    fake_assistant.unreachable.clear()
    base = _home_count(env, ALICE.user_id)
    status, _ = await env.sender.post_interaction(
        home_action(ALICE.user_id, "home_refresh", "home", block_id="home_top")
    )
    assert status == 200
    home = await _published(env, ALICE.user_id, base)
    assert ":white_check_mark: `docs` — connected" in _texts(home["blocks"])


async def test_approve_from_home_takes_the_cards_path(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    await env.fake.settle()
    base = _home_count(env, BOB.user_id)
    await env.sender.post_event(_home_opened(BOB.user_id))
    home = await _published(env, BOB.user_id, base)
    assert "Waiting for your decision" in _texts(home["blocks"])
    buttons = {a["action_id"]: a for a in _actions(home)}
    assert {"approval_approve", "approval_reject", "home_refresh"} <= set(buttons)
    assert buttons["approval_approve"]["value"] == "ap1"  # only the approval id
    assert "confirm" in buttons["approval_approve"]

    await env.sender.post_interaction(
        home_action(BOB.user_id, "approval_approve", buttons["approval_approve"]["value"])
    )
    # the card in the approvals channel is updated, as for a click on the card itself
    await env.fake.wait_for("chat.update", where=card_decided)
    decided = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
    assert all(b["type"] != "actions" for b in decided["blocks"])
    assert fake_assistant.executed == [
        ("ticketing_update_ticket", {"ticket_id": "PAY-1", "status": "closed"}, "alice@example.com")
    ]
    # and the Homes were republished: nothing waits for bob, alice's request is done
    await env.fake.settle()
    bob_last = [p for p in env.fake.calls_to("views.publish") if p["user_id"] == BOB.user_id][-1]
    assert "Waiting for your decision" not in _texts(bob_last["view"]["blocks"])


async def test_a_republished_home_keeps_the_servers_it_last_showed(env: SlackEnv) -> None:
    await env.sender.post_event(_home_opened(ALICE.user_id))
    opened = _texts((await _published(env, ALICE.user_id, 0))["blocks"])
    assert ":white_check_mark: `ticketing` — connected" in opened
    base = _home_count(env, ALICE.user_id)
    await _request_write(env)  # her Home is republished with the new request
    republished = _texts((await _published(env, ALICE.user_id, base))["blocks"])
    assert "waiting for an approver" in republished
    # not asked again (no tokens minted for a republish), but not dropped either
    assert "*Your servers*" in republished
    assert ":white_check_mark: `ticketing` — connected" in republished


async def test_home_of_someone_not_linked_asks_to_connect_and_lists_nothing(
    env: SlackEnv,
) -> None:
    await env.sender.post_event(_home_opened(ERIN.user_id))
    home = await _published(env, ERIN.user_id, 0)
    text = _texts(home["blocks"])
    assert "*not connected*" in text
    assert "Your servers" not in text
    assert "Your requests" not in text


async def test_a_slow_older_home_publish_never_covers_a_newer_one() -> None:
    """Opening the tab reads slowly (IdP, tokens); a decision republishes at once. The slow,
    older read finishing last must not put the stale list back."""
    import asyncio

    from bot.slack.core import ChatUser, ServerConnection

    gate = asyncio.Event()

    class SlowTab(FakeAssistant):
        async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
            await gate.wait()  # the tab's slow token checks
            return await super().connections(chat_user)

    client = PublishRecorder()
    published = client.views
    assistant = SlowTab()
    bob = ChatUser("slack", ALICE.team_id, BOB.user_id)
    assistant.link(bob, "bob")
    views = home_views(assistant, client)
    opened = asyncio.create_task(views.publish_home(bob, fresh=True))
    await asyncio.sleep(0.01)
    await views.publish_home(bob)  # after a decision: newer, and quick
    gate.set()
    await opened
    assert len(published) == 1  # the older read was dropped, not published over the newer


async def test_a_home_that_cannot_be_built_is_one_line_not_a_traceback(
    env: SlackEnv,
    fake_assistant: FakeAssistant,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bolt runs app_home_opened after the ack: a store closed under it (the app shutting
    down) was Bolt's "Failed to run listener function" with a traceback; the app's error
    handler makes it one line."""

    async def closed(*_: Any, **__: Any) -> Any:
        raise ValueError("no active connection")

    monkeypatch.setattr(fake_assistant, "status", closed)
    with caplog.at_level(logging.WARNING):
        status, _ = await env.sender.post_event(_home_opened(ALICE.user_id))
        assert status == 200

        async def logged() -> bool:
            return any("listener failed" in r.getMessage() for r in caplog.records)

        await until(logged)
    lines = [r for r in caplog.records if "listener failed" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].exc_info is None
    assert "ValueError" in lines[0].getMessage()
    assert not [r for r in caplog.records if "Failed to run listener" in r.getMessage()]


async def test_a_failing_refresh_is_one_line_not_bolts_traceback(
    env: SlackEnv,
    fake_assistant: FakeAssistant,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any listener that raises after the ack (here Refresh, with the store gone) is one
    warning line from the app's error handler, never Bolt's traceback."""

    async def closed(*_: Any, **__: Any) -> Any:
        raise ValueError("no active connection")

    monkeypatch.setattr(fake_assistant, "status", closed)
    with caplog.at_level(logging.WARNING):
        status, _ = await env.sender.post_interaction(
            home_action(ALICE.user_id, "home_refresh", "home", block_id="home_top")
        )
        assert status == 200

        async def logged() -> bool:
            return any("listener failed" in r.getMessage() for r in caplog.records)

        await until(logged)
    lines = [r for r in caplog.records if "listener failed" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].exc_info is None
    assert "ValueError" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info is not None]


async def test_a_burst_of_approval_changes_republishes_each_home_in_a_round_or_two() -> None:
    """Twenty clicks change twenty approvals three times each (decided, executing, finished)
    on one loop: the Homes are refreshed by rounds over every approval changed meanwhile,
    each user's Home once per round; no change is left without a round after it."""
    import asyncio

    from bot.slack.core import ChatUser

    gate = asyncio.Event()
    asked: list[str] = []

    class Audience(FakeAssistant):
        async def home_audience(self, approval_id: str) -> list[ChatUser]:
            asked.append(approval_id)
            await gate.wait()  # the first round is under way while the burst comes
            return [alice, bob]

    client = PublishRecorder()
    published = client.users
    assistant = Audience()
    alice = ChatUser("slack", ALICE.team_id, ALICE.user_id)
    bob = ChatUser("slack", ALICE.team_id, BOB.user_id)
    assistant.link(alice, "alice")
    assistant.link(bob, "bob", {"ticket-leads"})
    views = home_views(assistant, client)
    first = asyncio.create_task(views.approval_changed("a0"))
    await asyncio.sleep(0.01)
    burst = [f"a{i}" for i in range(20)]
    await asyncio.gather(*(views.approval_changed(a) for _ in range(3) for a in burst))
    gate.set()
    await first
    # A round for a0, then one round for all twenty (a0 changed again meanwhile)
    assert asked == ["a0", *burst]
    assert sorted(published) == sorted([ALICE.user_id, BOB.user_id] * 2)


async def test_a_stopping_bot_finishes_the_republishes_under_way_and_starts_no_more() -> None:
    """Ctrl-C right after a decision: the bot stops following approval changes before the
    stores a Home reads are closed. The republish under way is waited for (it publishes);
    a change the core reports afterwards publishes nothing (before, it read from a closed
    database: ``home not published: ValueError``)."""
    import asyncio

    from bot.slack.core import ChatUser

    gate = asyncio.Event()
    asked: list[str] = []

    class Audience(FakeAssistant):
        async def home_audience(self, approval_id: str) -> list[ChatUser]:
            asked.append(approval_id)
            await gate.wait()  # a republish under way when the bot is told to stop
            return [alice]

    client = PublishRecorder()
    published = client.users
    assistant = Audience()
    alice = ChatUser("slack", ALICE.team_id, ALICE.user_id)
    assistant.link(alice, "alice")
    views = home_views(assistant, client)
    under_way = asyncio.create_task(views.approval_changed("a1"))
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(views.stop_following_approvals(within=30))
    await asyncio.sleep(0.01)
    assert not stopping.done()  # waits for the republish under way
    gate.set()
    await stopping
    assert under_way.done()
    assert published == [ALICE.user_id]
    await views.approval_changed("a2")  # reported after the stop: nothing is read
    assert asked == ["a1"]
    assert published == [ALICE.user_id]


async def test_a_republish_that_outlasts_the_stop_wait_is_cancelled() -> None:
    import asyncio

    from bot.slack.core import ChatUser

    class Stuck(FakeAssistant):
        async def home_audience(self, approval_id: str) -> list[ChatUser]:
            await asyncio.Event().wait()
            return []

    views = home_views(Stuck())
    under_way = asyncio.create_task(views.approval_changed("a1"))
    await asyncio.sleep(0.01)
    await views.stop_following_approvals(within=0.05)
    with pytest.raises(asyncio.CancelledError):
        await under_way
