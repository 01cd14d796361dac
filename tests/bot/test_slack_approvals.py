"""Approval cards and decisions over HTTP: Approve, Edit (modal, field errors), Reject,
double clicks, unauthorised and unlinked clickers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from testing.fake_assistant import FakeAssistant
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    block_action,
    card_decided,
    mention,
    number_value,
    select_value,
    text_value,
    view_submission,
)
from tests.bot.conftest import ALICE, BOB, DAVE, ERIN, RunApp, SlackEnv
from tests.bot.test_slack_events import _texts

ROOT = "1700000100.000100"


async def _request_write(env: SlackEnv, text: str = "update PAY-1 status=closed") -> dict[str, Any]:
    """Alice asks for a write; returns the card message as stored by the fake Slack."""
    await env.sender.post_event(mention(ALICE.user_id, text, channel="C0PAY", ts=ROOT))
    posted = await env.fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals"
    )
    card_ts = [ts for (ch, ts) in env.fake.messages if ch == APPROVALS_CHANNEL_ID]
    assert len(card_ts) == 1
    assert posted[0]["blocks"]
    return env.fake.messages[(APPROVALS_CHANNEL_ID, card_ts[0])]


def _buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["action_id"]: e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]
    }


async def _click(env: SlackEnv, user: str, action_id: str, card: dict[str, Any]) -> tuple[int, str]:
    value = _buttons(card)[action_id]["value"] if _buttons(card) else "ap1"
    return await env.sender.post_interaction(
        block_action(user, action_id, value, message_ts=card["ts"])
    )


async def test_write_posts_a_card_approve_runs_it_updates_card_and_tells_requester(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    text = _texts(card["blocks"])
    assert "<@U0ALICE> (alice@example.com)" in text
    assert card["blocks"][0]["text"]["text"] == "ticketing · ticketing_update_ticket"
    assert "• *ticket_id*: `PAY-1`" in text
    assert "• *status*: `closed`" in text
    assert "Read first: ticketing_get_ticket PAY-1" in text
    alert = next(b for b in card["blocks"] if b["type"] == "alert")
    assert "<!date^" in alert["text"]["text"]  # the expiry, in each reader's time zone
    buttons = _buttons(card)
    assert {b["value"] for b in buttons.values()} == {"ap1"}  # only the approval id
    assert "confirm" in buttons["approval_approve"]
    # The requester is told in their thread that it waits.
    waiting = env.fake.thread("C0PAY", ROOT)
    assert any("needs approval in #ops-approvals" in _texts(m["blocks"]) for m in waiting)

    status, _ = await _click(env, BOB.user_id, "approval_approve", card)
    assert status == 200
    await env.fake.wait_for("chat.update", where=card_decided)
    told = await env.fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "C0PAY" and "approved" in p["text"]
    )
    assert fake_assistant.executed == [
        ("ticketing_update_ticket", {"ticket_id": "PAY-1", "status": "closed"}, "alice@example.com")
    ]
    updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
    assert _buttons(updated) == {}
    assert "Approved* by bob@example.com" in _texts(updated["blocks"])
    assert "*Outcome:* approved" in _texts(updated["blocks"])
    assert told[0]["thread_ts"] == ROOT
    assert "Updated PAY-1: status=closed." in _texts(told[0]["blocks"])


async def test_double_click_executes_once_and_the_second_click_is_told(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    results = await asyncio.gather(
        *(_click(env, BOB.user_id, "approval_approve", card) for _ in range(3))
    )
    assert all(status == 200 for status, _ in results)
    notes = await env.fake.wait_for("chat.postEphemeral", 2)
    await env.fake.settle()
    assert len(fake_assistant.executed) == 1
    assert all("already decided by bob@example.com" in n["text"] for n in notes)
    assert len(env.fake.calls_to("chat.postEphemeral")) == 2


async def test_non_approver_and_unlinked_clicks_are_refused(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    await _click(env, DAVE.user_id, "approval_approve", card)
    refusal = (await env.fake.wait_for("chat.postEphemeral"))[0]
    assert refusal["user"] == DAVE.user_id
    assert "You can't decide this request: only members of ticket-leads" in refusal["text"]
    await _click(env, ERIN.user_id, "approval_approve", card)
    connect = (await env.fake.wait_for("chat.postEphemeral", 2))[1]
    assert connect["user"] == ERIN.user_id
    assert connect["blocks"][1]["elements"][0]["url"].endswith("user=U0ERIN")
    await env.fake.settle()
    assert fake_assistant.executed == []
    # Each click shows "Approving… (clicker)" at once; the refusal gives the buttons back.
    # Nothing on the card ever says the request was decided.
    updates = [u for u in env.fake.calls_to("chat.update") if u["channel"] == APPROVALS_CHANNEL_ID]
    assert [u["text"].split(":")[0] for u in updates] == [
        "Approving… (<@U0DAVE>)",
        "Approval needed",
        "Approving… (<@U0ERIN>)",
        "Approval needed",
    ]
    assert _buttons(env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])])


async def _open_edit(env: SlackEnv, user: str, card: dict[str, Any]) -> dict[str, Any]:
    status, _ = await _click(env, user, "approval_edit", card)
    assert status == 200
    opened = await env.fake.wait_for("views.open")
    return dict(opened[-1]["view"])


def _edit_values(
    status: str | None, priority: str | None, comment: str | None = None
) -> dict[str, dict[str, Any]]:
    return {
        "arg:ticket_id": text_value("PAY-1"),
        "arg:status": select_value(None if status is None else json.dumps(status)),
        "arg:priority": number_value(priority),
        "arg:comment": text_value(comment),
    }


async def test_edit_opens_a_modal_generated_from_the_tool_schema(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    modal = await _open_edit(env, BOB.user_id, card)
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert list(inputs) == ["arg:ticket_id", "arg:status", "arg:priority", "arg:comment"]
    assert inputs["arg:ticket_id"]["element"]["initial_value"] == "PAY-1"
    assert inputs["arg:ticket_id"]["optional"] is False
    status = inputs["arg:status"]["element"]
    assert status["type"] == "static_select"
    assert [o["value"] for o in status["options"]] == ['"open"', '"in_progress"', '"closed"']
    assert status["initial_option"]["value"] == '"closed"'
    assert inputs["arg:priority"]["element"]["type"] == "number_input"
    assert inputs["arg:priority"]["element"]["is_decimal_allowed"] is False
    assert inputs["arg:priority"]["optional"] is True
    assert json.loads(modal["private_metadata"])["a"] == "ap1"
    assert "PAY-1" not in modal["private_metadata"]  # arguments stay server-side
    await env.fake.settle()
    assert env.fake.calls_to("views.update") == []  # an approver keeps the form


async def test_edit_invalid_values_come_back_as_field_errors_valid_ones_run(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    modal = await _open_edit(env, BOB.user_id, card)
    # Not a number: caught before the core is asked.
    status, body = await env.sender.post_interaction(
        view_submission(BOB.user_id, modal, _edit_values("open", "abc"))
    )
    assert status == 200
    assert json.loads(body) == {
        "response_action": "errors",
        "errors": {"arg:priority": "Enter a whole number."},
    }
    # Out of range: the core refuses, the error lands on the field.
    status, body = await env.sender.post_interaction(
        view_submission(BOB.user_id, modal, _edit_values("open", "9"))
    )
    assert json.loads(body) == {
        "response_action": "errors",
        "errors": {"arg:priority": "must be between 1 and 5"},
    }
    # Required field left empty.
    status, body = await env.sender.post_interaction(
        view_submission(BOB.user_id, modal, _edit_values(None, "2"))
    )
    assert json.loads(body)["errors"] == {"arg:status": "Required."}
    assert fake_assistant.executed == []
    status, body = await env.sender.post_interaction(
        view_submission(BOB.user_id, modal, _edit_values("in_progress", "2", "by approver"))
    )
    assert (status, body) == (200, "")
    await env.fake.wait_for("chat.update", where=card_decided)
    assert fake_assistant.executed == [
        (
            "ticketing_update_ticket",
            {
                "ticket_id": "PAY-1",
                "status": "in_progress",
                "priority": 2,
                "comment": "by approver",
            },
            "alice@example.com",
        )
    ]
    updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
    assert "Approved with edits* by bob@example.com" in _texts(updated["blocks"])


async def test_reject_with_reason_writes_nothing_and_tells_the_requester(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    await _click(env, BOB.user_id, "approval_reject", card)
    modal = (await env.fake.wait_for("views.open"))[0]["view"]
    assert modal["callback_id"] == "approval_reject_submit"
    status, body = await env.sender.post_interaction(
        view_submission(BOB.user_id, modal, {"reason": text_value("wrong ticket")})
    )
    assert (status, body) == (200, "")
    told = await env.fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "C0PAY" and "rejected" in p["text"]
    )
    assert fake_assistant.executed == []
    decision = fake_assistant.decisions[0][2]
    assert decision.reason == "wrong ticket"  # type: ignore[union-attr]
    assert "nothing was written" in _texts(told[0]["blocks"])
    updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
    assert _buttons(updated) == {}
    assert "Rejected* by bob@example.com" in _texts(updated["blocks"])


async def test_forged_click_is_refused(env: SlackEnv, fake_assistant: FakeAssistant) -> None:
    card = await _request_write(env)
    status, _ = await env.sender.post_interaction(
        block_action(BOB.user_id, "approval_approve", "ap1", message_ts=card["ts"]),
        signature_override="v0=" + "f" * 64,
    )
    assert status == 401
    await asyncio.sleep(0.3)
    assert fake_assistant.decisions == []


async def test_edit_or_reject_by_a_non_approver_turns_the_modal_into_a_refusal(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    modal = await _open_edit(env, DAVE.user_id, card)
    updated = (await env.fake.wait_for("views.update"))[0]
    assert "You can't decide this request" in _texts(updated["view"]["blocks"])
    note = (await env.fake.wait_for("chat.postEphemeral"))[0]
    assert note["user"] == DAVE.user_id
    # Submitting anyway (a stale modal) is refused by the core, shown in the modal.
    status, body = await env.sender.post_interaction(
        view_submission(DAVE.user_id, modal, _edit_values("open", "1"))
    )
    assert status == 200
    assert json.loads(body)["response_action"] == "update"
    await _click(env, ERIN.user_id, "approval_reject", card)
    connect = await env.fake.wait_for(
        "chat.postEphemeral", where=lambda p: p["user"] == ERIN.user_id
    )
    assert connect[0]["blocks"][1]["elements"][0]["url"].endswith("user=U0ERIN")
    await env.fake.settle()
    assert fake_assistant.executed == []
    assert _buttons(env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])])


async def test_slow_edit_closes_the_modal_in_time_and_reports_when_done(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    fake_assistant.decide_delay = 0.5  # longer than the submission wait below
    async with run_app(fake_assistant, submission_wait_seconds=0.1) as env:
        card = await _request_write(env)
        modal = await _open_edit(env, BOB.user_id, card)
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, _edit_values("open", "9"))
        )
        assert (status, body) == (200, "")  # acked before the core answered
        note = (await env.fake.wait_for("chat.postEphemeral"))[0]
        assert note["user"] == BOB.user_id
        assert "priority: must be between 1 and 5" in note["text"]
        status, body = await env.sender.post_interaction(
            view_submission(BOB.user_id, modal, _edit_values("open", "3"))
        )
        assert (status, body) == (200, "")
        await env.fake.wait_for("chat.update", where=card_decided)
    assert fake_assistant.executed == [
        (
            "ticketing_update_ticket",
            {"ticket_id": "PAY-1", "status": "open", "priority": 3},
            "alice@example.com",
        )
    ]


async def test_approve_from_app_home_updates_the_card_and_foreign_teams_are_refused(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    card = await _request_write(env)
    await env.fake.settle()
    foreign = block_action("U0GUEST", "approval_approve", "ap1", team="T0GUEST")
    await env.sender.post_interaction(foreign)
    refusal = (await env.fake.wait_for("chat.postEphemeral"))[0]
    assert refusal["user"] == "U0GUEST"
    assert "not available to your workspace" in refusal["text"]
    assert fake_assistant.decisions == []
    # A click on the Home tab has no channel or message: the card is found by approval id.
    home_click = block_action(BOB.user_id, "approval_approve", "ap1")
    home_click["container"] = {"type": "view", "view_id": "VHOME"}
    del home_click["channel"], home_click["message"]
    status, _ = await env.sender.post_interaction(home_click)
    assert status == 200
    await env.fake.wait_for("chat.update", where=card_decided)
    updated = env.fake.messages[(APPROVALS_CHANNEL_ID, card["ts"])]
    assert _buttons(updated) == {}
    assert len(fake_assistant.executed) == 1
