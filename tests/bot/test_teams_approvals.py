"""Teams approvals over real HTTP: the fake Teams channel, the Teams app on a loopback port,
the scripted core (``FakeAssistant``).

write → a card posted as a new thread in the approvals channel, refreshed with buttons only
for eligible approvers → approve: the invoke answer is the terminal card, everyone's copy is
PUT, the requester is told; edit invalid → field errors; reject → nothing run; non-approver
→ refused; concurrent clicks → one execution; forged clicks → 400 bodies, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.teams.approval_cards import card_digest
from bot.teams.core import ChatUser
from testing.fake_assistant import FakeAssistant
from testing.teams import (
    APPROVALS_CHANNEL_ID,
    TENANT_ID,
    ConnectorCall,
    FakeTeams,
    TeamsUser,
    new_user,
)
from tests.fixtures.teams import RunTeams, TeamsEnv

pytestmark = pytest.mark.timeout(60)

ALICE = new_user("Alice")  # requester
BOB = new_user("Bob")  # ticket-leads: an approver
DAVE = new_user("Dave")  # no approver group


def chat(user: TeamsUser) -> ChatUser:
    return ChatUser("teams", user.tenant_id, user.aad_object_id)


@pytest.fixture
def assistant() -> FakeAssistant:
    fake = FakeAssistant()
    fake.link(chat(ALICE), "alice", {"team-payments"})
    fake.link(chat(BOB), "bob", {"team-payments", "ticket-leads"})
    fake.link(chat(DAVE), "dave", {"team-platform"})
    return fake


@pytest.fixture
async def env(run_teams: RunTeams, assistant: FakeAssistant) -> AsyncIterator[TeamsEnv]:
    async with run_teams(assistant, approvals_conversation_id=APPROVALS_CHANNEL_ID) as running:
        running.fake.members[APPROVALS_CHANNEL_ID] = [ALICE, BOB, DAVE]
        yield running
        await running.bot.adapter.approvals.idle()


def click(
    fake: FakeTeams,
    user: TeamsUser,
    card: ConnectorCall,
    verb: str,
    data: dict[str, Any] | None = None,
    *,
    trigger: str = "manual",
) -> dict[str, Any]:
    """The ``adaptiveCard/action`` invoke Teams sends when ``user`` clicks on ``card``."""
    content = card.cards[0]
    action_data = dict(content["refresh"]["action"]["data"]) if "refresh" in content else {}
    root = card.conversation_id.partition(";messageid=")[2]
    return {
        "type": "invoke",
        "name": "adaptiveCard/action",
        "id": f"f:{root}{verb}{user.name}{len(fake.calls)}",
        "channelId": "msteams",
        "serviceUrl": fake.service_url,
        "from": {"id": user.mri, "name": user.name, "aadObjectId": user.aad_object_id},
        "recipient": {"id": f"28:{fake.app_id}", "name": "opsbot"},
        "conversation": {
            "id": card.conversation_id,
            "conversationType": "channel",
            "isGroup": True,
            "tenantId": user.tenant_id,
        },
        "channelData": {"tenant": {"id": user.tenant_id}, "channel": {"id": APPROVALS_CHANNEL_ID}},
        "replyToId": root,
        "value": {
            "action": {
                "type": "Action.Execute",
                "verb": verb,
                "data": {**action_data, **(data or {})},
            },
            "trigger": trigger,
        },
    }


async def invoke(env: TeamsEnv, activity: dict[str, Any]) -> dict[str, Any]:
    status, text = await env.post(activity)
    assert status == 200, (status, text)
    body = json.loads(text)
    assert isinstance(body, dict)
    return body


def verbs(card: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "Action.Execute" and node is not card.get("refresh", {}).get(
                "action"
            ):
                found.append(node["verb"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in card.items() if k != "refresh"})
    return found


def shown(card: dict[str, Any]) -> str:
    return json.dumps(card, ensure_ascii=False)


async def request_write(
    env: TeamsEnv, text: str = "update PAY-1 status=closed"
) -> tuple[ConnectorCall, dict[str, Any]]:
    """Alice asks in a channel; the card posted as a new thread in the approvals channel."""
    ask = env.fake.mention(ALICE, text)
    status, _ = await env.post(ask)
    assert status == 202
    (created,) = await env.fake.wait_for(
        "create", where=lambda c: c.conversation_id.startswith(APPROVALS_CHANNEL_ID)
    )
    await env.bot.adapter.idle()  # the card's location is saved once Teams answered the post
    return created, ask


async def test_write_card_approve_updates_every_copy_and_tells_the_requester(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    card, ask = await request_write(env)
    content = card.cards[0]
    assert content["version"] == "1.5"
    assert content["refresh"]["userIds"] == [BOB.mri]  # the approver; never alice or dave
    assert verbs(content) == []  # everyone else sees a read-only card
    assert "PAY-1" in shown(content)
    # Alice's thread hears that it waits.
    thread = ask["conversation"]["id"]
    await env.fake.wait_for("posted", where=lambda c: c.conversation_id == thread)

    # Teams refreshes Bob's view: buttons. Dave's refresh: still read-only.
    bobs = await invoke(env, click(env.fake, BOB, card, "approval.view", trigger="automatic"))
    assert bobs["statusCode"] == 200, bobs
    assert bobs["type"] == "application/vnd.microsoft.card.adaptive"
    assert verbs(bobs["value"]) == ["approve", "approval.edit_view", "reject"]
    daves = await invoke(env, click(env.fake, DAVE, card, "approval.view", trigger="automatic"))
    assert verbs(daves["value"]) == []

    done = await invoke(env, click(env.fake, BOB, card, "approve"))
    assert done["statusCode"] == 200
    assert "Approved by bob@example.com" in shown(done["value"])
    assert verbs(done["value"]) == []
    assert "refresh" not in done["value"]
    assert assistant.executed == [
        ("ticketing_update_ticket", {"ticket_id": "PAY-1", "status": "closed"}, "alice@example.com")
    ]
    root = card.conversation_id.partition(";messageid=")[2]
    (update,) = await env.fake.wait_for("update", where=lambda c: c.activity_id == root)
    assert "Approved by bob@example.com" in update.text  # everyone's copy
    await env.fake.wait_for(
        "posted", where=lambda c: c.conversation_id == thread and "approved by" in c.text
    )
    await env.fake.wait_for(  # then the resumed run's answer
        "posted", where=lambda c: c.conversation_id == thread and "Updated PAY-1" in c.text
    )


async def test_an_invalid_edit_shows_field_errors_and_runs_nothing(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    card, _ = await request_write(env)
    form = await invoke(env, click(env.fake, BOB, card, "approval.edit_view"))
    inputs = {e["id"]: e for e in form["value"]["body"] if e["type"].startswith("Input.")}
    assert inputs["arg.status"]["value"] == "closed"
    assert verbs(form["value"]) == ["edit", "approval.view"]

    typed = await invoke(
        env, click(env.fake, BOB, card, "edit", {"arg.status": "closed", "arg.priority": "high"})
    )
    assert "must be a number" in shown(typed["value"])
    checked = await invoke(
        env, click(env.fake, BOB, card, "edit", {"arg.status": "closed", "arg.priority": "9"})
    )
    assert "must be between 1 and 5" in shown(checked["value"])  # the core's own check
    assert verbs(checked["value"]) == ["edit", "approval.view"]  # still editable
    assert assistant.executed == []

    done = await invoke(
        env, click(env.fake, BOB, card, "edit", {"arg.status": "in_progress", "arg.priority": "2"})
    )
    assert "Approved with edits" in shown(done["value"])
    assert assistant.executed[0][1] == {
        "ticket_id": "PAY-1",
        "status": "in_progress",
        "priority": 2,
    }


async def test_reject_runs_nothing_and_says_so_everywhere(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    card, ask = await request_write(env)
    done = await invoke(env, click(env.fake, BOB, card, "reject", {"reject_reason": "not today"}))
    assert "Rejected by bob@example.com" in shown(done["value"])
    assert assistant.executed == []
    (_, _approval_id, decision) = assistant.decisions[-1]
    assert decision.reason == "not today"  # type: ignore[union-attr]
    root = card.conversation_id.partition(";messageid=")[2]
    await env.fake.wait_for("update", where=lambda c: c.activity_id == root)
    thread = ask["conversation"]["id"]
    await env.fake.wait_for(
        "posted", where=lambda c: c.conversation_id == thread and "rejected by" in c.text
    )


async def test_a_non_approver_is_refused_and_nothing_runs(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    card, _ = await request_write(env)
    refused = await invoke(env, click(env.fake, DAVE, card, "approve"))
    assert refused["statusCode"] == 200
    assert "You can't decide this request" in shown(refused["value"])
    own = await invoke(env, click(env.fake, ALICE, card, "approve"))
    assert "You can't decide this request" in shown(own["value"])
    assert assistant.executed == []
    assert env.fake.calls_to("update") == []


async def test_concurrent_clicks_execute_once(env: TeamsEnv, assistant: FakeAssistant) -> None:
    assistant.decide_delay = 0.2
    card, _ = await request_write(env)
    answers = await asyncio.gather(
        *(invoke(env, click(env.fake, BOB, card, "approve")) for _ in range(4))
    )
    assert len(assistant.executed) == 1
    assert all(a["statusCode"] == 200 for a in answers)
    assert sum("Approved by" in shown(a["value"]) for a in answers) >= 1


@pytest.mark.parametrize(
    "forge",
    [
        lambda a: a["value"]["action"]["data"].update(approval_id="ap-nope"),
        lambda a: a["value"]["action"]["data"].pop("approval_id"),
        lambda a: a["value"]["action"].update(verb="approve_everything"),
        lambda a: a["value"]["action"].update(data="ap1"),
        lambda a: a.update(replyToId="123"),  # not the card's message
        lambda a: a["conversation"].update(id="19:other@thread.tacv2;messageid=1"),
        lambda a: a.update(value=None),
    ],
)
async def test_forged_clicks_get_a_clear_400(
    env: TeamsEnv, assistant: FakeAssistant, forge: Any
) -> None:
    card, _ = await request_write(env)
    activity = click(env.fake, BOB, card, "approve")
    forge(activity)
    status, text = await env.post(activity)
    assert status in (200, 400), text
    if status == 200:
        body = json.loads(text)
        assert body["statusCode"] == 400
        assert body["type"] == "application/vnd.microsoft.error"
        assert "Traceback" not in body["value"]["message"]
    assert assistant.executed == []


async def test_a_stale_card_does_not_decide(env: TeamsEnv, assistant: FakeAssistant) -> None:
    card, _ = await request_write(env)
    activity = click(env.fake, BOB, card, "approve", {"v": "0" * 16})
    answer = await invoke(env, activity)
    assert "changed since you opened it" in shown(answer["value"])
    assert assistant.executed == []
    view = next(iter(assistant.approvals.values()))
    assert card.cards[0]["refresh"]["action"]["data"]["v"] == card_digest(view)


async def test_a_decision_made_elsewhere_updates_the_teams_card(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    from dataclasses import replace

    from bot.teams.core import Answer, Answered, ApprovalNotice, Decided

    card, ask = await request_write(env)
    (approval_id,) = assistant.approvals
    view = assistant.approvals[approval_id]
    assistant.approvals[approval_id] = replace(view, status="rejected", decided_by="carol")
    decided = Decided(
        approval_id,
        "rejected",
        "carol@example.com",
        "rejected",
        view.requester_ref,
        Answered(Answer("Nothing was changed.")),
        state="rejected",
    )
    await env.bot.adapter.approvals.on_notice(ApprovalNotice("n1", "decided", approval_id, decided))
    root = card.conversation_id.partition(";messageid=")[2]
    (update,) = await env.fake.wait_for("update", where=lambda c: c.activity_id == root)
    assert "Rejected by carol@example.com" in update.text
    thread = ask["conversation"]["id"]
    await env.fake.wait_for(
        "posted", where=lambda c: c.conversation_id == thread and "rejected by" in c.text
    )
    # A late Teams click changes nothing.
    late = await invoke(env, click(env.fake, BOB, card, "approve"))
    assert "Rejected by" in shown(late["value"])
    assert assistant.executed == []


def test_tenant_of_the_fake_is_the_bots() -> None:
    assert ALICE.tenant_id == TENANT_ID


async def test_a_slow_decision_is_answered_at_once_and_finished_for_everyone(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    """Teams gives an invoke a few seconds: a longer decision answers "Approving…" and the
    terminal card reaches everyone's copy when it is done."""
    env.bot.adapter.approvals.decide_wait = 0.05
    assistant.decide_delay = 0.5
    card, _ = await request_write(env)
    answer = await invoke(env, click(env.fake, BOB, card, "approve"))
    assert "Approving…" in shown(answer["value"])
    assert verbs(answer["value"]) == []
    root = card.conversation_id.partition(";messageid=")[2]
    (update,) = await env.fake.wait_for("update", where=lambda c: c.activity_id == root)
    assert "Approved by bob@example.com" in update.text
    assert len(assistant.executed) == 1


async def test_a_card_posted_through_an_old_service_url_is_updated_through_the_current_one(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    """Teams may serve the tenant from another serviceUrl later (``opsbot dev --keep`` starts
    its fake channel on a new port): a click carries the current one, and the roster read and
    everyone's copy go there, not to the serviceUrl the card was stored with."""
    from sqlalchemy import update

    from infra.storage.schema import chat_approval_messages

    card, _ = await request_write(env)
    cards = env.bot.adapter.approvals.cards
    assert cards is not None
    async with cards._engine.begin() as conn:
        gone = await conn.execute(
            update(chat_approval_messages).values(service_url="http://127.0.0.1:9/gone/")
        )
    assert gone.rowcount == 1
    env.bot.adapter.approvals.service_url = "http://127.0.0.1:9/gone/"  # what it saw last
    env.bot.adapter.approvals._roster = None  # the roster is read again, too

    bobs = await invoke(env, click(env.fake, BOB, card, "approval.view", trigger="automatic"))
    assert verbs(bobs["value"]) == ["approve", "approval.edit_view", "reject"]
    assert bobs["value"]["refresh"]["userIds"] == [BOB.mri]  # the roster was read
    done = await invoke(env, click(env.fake, BOB, card, "approve"))
    assert "Approved by bob@example.com" in shown(done["value"])
    root = card.conversation_id.partition(";messageid=")[2]
    (update_call,) = await env.fake.wait_for("update", where=lambda c: c.activity_id == root)
    assert "Approved by bob@example.com" in update_call.text


async def test_a_refresh_while_the_card_is_being_recorded_waits_for_it(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    """Teams shows the card, and asks for the approver's view, as soon as the Connector has
    it: before its answer (the card's id) is back and recorded. That refresh waits for the
    record and answers with the buttons, instead of refusing the card as unknown."""
    cards = env.bot.adapter.approvals.cards
    assert cards is not None
    recorded = cards.save
    release = asyncio.Event()

    async def slow_save(card: Any) -> bool:
        await release.wait()
        return await recorded(card)

    cards.save = slow_save  # type: ignore[method-assign]
    status, _ = await env.post(env.fake.mention(ALICE, "update PAY-1 status=closed"))
    assert status == 202
    (card,) = await env.fake.wait_for(
        "create", where=lambda c: c.conversation_id.startswith(APPROVALS_CHANNEL_ID)
    )
    refresh = asyncio.ensure_future(
        invoke(env, click(env.fake, BOB, card, "approval.view", trigger="automatic"))
    )
    await asyncio.sleep(0.2)
    assert not refresh.done()  # waiting for the record, not refused
    release.set()
    bobs = await refresh
    assert bobs["statusCode"] == 200, bobs
    assert verbs(bobs["value"]) == ["approve", "approval.edit_view", "reject"]


async def test_an_edit_with_a_lone_surrogate_is_run_once_and_shown(
    env: TeamsEnv, assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    """JSON can carry a lone surrogate, UTF-8 cannot: an approver's edit with one ran the tool,
    then failed to show the decision (a 500 to the approver, who could retry a change already
    made, and no card updated). It goes on with U+FFFD, as opsbot's replies do."""
    card, _ = await request_write(env)
    edit = {"arg.status": "closed", "arg.comment": "a\ud800b"}
    with caplog.at_level(logging.WARNING):
        done = await invoke(env, click(env.fake, BOB, card, "edit", edit))
    assert done["statusCode"] == 200, done
    assert "Approved with edits" in shown(done["value"])
    assert assistant.executed[0][1]["comment"] == "a\ufffdb"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
