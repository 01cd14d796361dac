"""Parity of approvals: the same scenarios on Slack and on Teams (``driver`` is each in turn),
through their fakes over HTTP, with the scripted core behind both.

write → card → approve: it runs once, as the requester, the card shows it for everyone and the
requester is told; an invalid edit comes back as field errors and runs nothing; reject runs
nothing; a non-approver (or the requester) is refused; concurrent clicks run it once.
"""

from __future__ import annotations

import asyncio

import pytest

from testing.fake_assistant import FakeAssistant
from tests.parity.approval_drivers import approvals_for
from tests.parity.drivers import Driver

WRITE = "update PAY-1 status=closed"
RAN = ("ticketing_update_ticket", {"ticket_id": "PAY-1", "status": "closed"}, "alice@example.com")

pytestmark = pytest.mark.timeout(60)


async def test_write_card_approve_runs_once_updates_the_card_and_tells_the_requester(
    driver: Driver, assistant: FakeAssistant
) -> None:
    approvals = approvals_for(driver)
    sent, card = await approvals.request_write("alice", WRITE)
    await approvals.click("bob", card, "approve")
    shown = await approvals.card_now(card)
    assert "Approved" in shown
    assert "bob@example.com" in shown
    assert assistant.executed == [RAN]
    answers = await driver.answers(sent, 3)  # the reply, "needs approval", the result
    assert any("approved by bob@example.com" in a.replace("*", "") for a in answers)
    assert "Updated PAY-1: status=closed." in "\n".join(answers)


async def test_an_invalid_edit_returns_field_errors_and_runs_nothing(
    driver: Driver, assistant: FakeAssistant
) -> None:
    approvals = approvals_for(driver)
    _, card = await approvals.request_write("alice", WRITE)
    shown = await approvals.edit("bob", card, "closed", "9")
    assert "must be between 1 and 5" in shown
    assert assistant.executed == []
    await approvals.edit("bob", card, "in_progress", "2")
    assert "Approved with edits" in await approvals.card_now(card)
    assert assistant.executed[0][1] == {
        "ticket_id": "PAY-1",
        "status": "in_progress",
        "priority": 2,
    }


async def test_reject_runs_nothing(driver: Driver, assistant: FakeAssistant) -> None:
    approvals = approvals_for(driver)
    sent, card = await approvals.request_write("alice", WRITE)
    await approvals.click("bob", card, "reject", reason="wrong ticket")
    shown = await approvals.card_now(card)
    assert "Rejected" in shown
    assert "bob@example.com" in shown
    assert assistant.executed == []
    assert assistant.decisions[-1][2].reason == "wrong ticket"  # type: ignore[union-attr]
    answers = await driver.answers(sent, 3)
    assert any("rejected by bob@example.com" in a.replace("*", "") for a in answers)


async def test_a_non_approver_is_refused(driver: Driver, assistant: FakeAssistant) -> None:
    approvals = approvals_for(driver)
    assistant.link(driver.chat_user("erin"), "erin", {"team-platform"})  # linked, no rights
    _, card = await approvals.request_write("alice", WRITE)
    assert "You can't decide this request" in await approvals.click("erin", card, "approve")
    assert "You can't decide this request" in await approvals.click("alice", card, "approve")
    assert assistant.executed == []


async def test_concurrent_clicks_run_it_once(driver: Driver, assistant: FakeAssistant) -> None:
    approvals = approvals_for(driver)
    assistant.decide_delay = 0.2
    _, card = await approvals.request_write("alice", WRITE)
    await asyncio.gather(*(approvals.click("bob", card, "approve") for _ in range(4)))
    assert "Approved" in await approvals.card_now(card)
    assert assistant.executed == [RAN]
