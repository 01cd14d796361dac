"""Parity: one list of scenarios, each run against the Slack and the Teams adapter through
their fakes over HTTP (``driver`` is each in turn). A scenario states what a person sees;
the driver knows how their platform shows it."""

from __future__ import annotations

import asyncio

import pytest

from testing.fake_assistant import FakeAssistant
from tests.parity.drivers import Driver

SOURCE_LINK = "http://tickets.test/PAY-1"


async def test_mention_is_answered_with_sources(driver: Driver, assistant: FakeAssistant) -> None:
    sent = await driver.mention("alice", "show PAY-1")
    assert sent.status == 200 or sent.status == 202
    (answer,) = await driver.answers(sent)
    assert "PAY-1 is open" in answer
    assert SOURCE_LINK in answer
    (asked,) = assistant.messages
    assert asked[0] == driver.chat_user("alice")
    assert asked[2] == "show PAY-1"  # the mention itself is not part of the question


async def test_personal_chat_is_answered(driver: Driver, assistant: FakeAssistant) -> None:
    sent = await driver.personal("alice", "what is open?")
    (answer,) = await driver.answers(sent)
    assert "You asked: what is open?" in answer


async def test_duplicate_delivery_gets_one_answer(driver: Driver, assistant: FakeAssistant) -> None:
    sent = await driver.mention("alice", "show PAY-1")
    assert await driver.redeliver(sent) in (200, 202)
    await driver.answers(sent)
    await driver.settle()
    assert len(await driver.answers(sent)) == 1
    assert len(assistant.messages) == 1


@pytest.mark.parametrize(
    "kind", ["forged", "expired", "wrong_audience", "wrong_serviceurl", "wrong_tenant"]
)
async def test_bad_credentials_run_nothing(
    driver: Driver, assistant: FakeAssistant, kind: str
) -> None:
    before = driver.bot_calls()
    status = await driver.forged("alice", "show PAY-1", kind)
    if status is None:
        pytest.skip(f"{driver.platform} has no {kind.replace('_', ' ')}")
    assert status in driver.refusal_statuses(kind)
    await driver.settle()
    assert assistant.messages == []
    assert driver.bot_calls() == before


async def test_unlinked_person_gets_a_private_sign_in(
    driver: Driver, assistant: FakeAssistant
) -> None:
    await driver.mention("erin", "show PAY-1")
    link = await driver.sign_in_link("erin")
    assert link == await assistant.link_url(driver.chat_user("erin"))
    await driver.settle()
    # The core was asked once, answered LinkRequired, and no thread was opened for erin.
    assert [user for user, _, _ in assistant.messages] == [driver.chat_user("erin")]
    assert assistant.threads._by_ref == {}


async def test_another_person_never_continues_the_owners_thread(
    driver: Driver, assistant: FakeAssistant
) -> None:
    first = await driver.mention("alice", "show PAY-1")
    await driver.answers(first)
    second = await driver.mention("bob", "and close it", in_thread_of=first)
    answers = await driver.answers(second, 2)
    assert "belongs to someone else" in answers[-1]
    assert "You asked: and close it" not in "\n".join(answers)
    # The core was asked with the same thread both times; it refused bob.
    (_, alice_ref, _), (_, bob_ref, _) = assistant.messages
    assert alice_ref == bob_ref


async def test_one_person_one_identity_across_platforms(
    driver: Driver, assistant: FakeAssistant
) -> None:
    """alice on either platform is the same company identity: her thread, her rights."""
    sent = await driver.mention("alice", "show PAY-1")
    await driver.answers(sent)
    ((user, ref, _),) = assistant.messages
    thread = await assistant.threads.get_or_create(ref, "someone-else")
    assert thread.owner_subject == "alice"
    assert user.platform == driver.platform


async def _stops(assistant: FakeAssistant, count: int) -> None:
    for _ in range(200):
        if len(assistant.stops) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} stop(s), got {assistant.stops}")


async def test_stop_reaches_the_core_for_that_thread_and_is_never_a_question(
    driver: Driver, assistant: FakeAssistant
) -> None:
    """Stop takes the one core path (``AssistantPort.stop``) with the thread's own ref and the
    presser's identity; the core decides (owner only). It is never asked as a question."""
    sent = await driver.mention("alice", "show PAY-1")
    await driver.answers(sent)
    assert await driver.stop("alice", sent) in (200, 202)
    await _stops(assistant, 1)
    assert await driver.stop("bob", sent) in (200, 202)
    await _stops(assistant, 2)
    await driver.settle()
    (asked,) = assistant.messages
    thread = asked[1]
    assert assistant.stops == [
        (driver.chat_user("alice"), thread),
        (driver.chat_user("bob"), thread),
    ]


async def test_an_unconnected_oauth_server_gets_a_private_connect_button(
    driver: Driver, assistant: FakeAssistant
) -> None:
    """``ServerConnectRequired``: what could be answered goes in the thread; a *Connect docs*
    button opening the connect URL goes to the asker alone (the link is bound to them), and
    the URL is in no text anywhere, only behind that button."""
    sent = await driver.mention("alice", "runbook for PAY-1")
    label, url = await driver.connect_button("alice")
    assert label == "Connect docs"
    assert url == assistant.connect_url(driver.chat_user("alice"), "docs")
    answers = await driver.answers(sent)
    assert "PAY-1 is open; its runbook is in docs" in answers[0]
    assert url not in "\n".join(answers)
    if driver.platform == "teams":  # the card went to the personal chat: the thread is told
        notice = answers[-1]
        assert "connect docs in a private chat" in notice  # not "a sign-in link"
        assert "sign-in" not in notice
    await driver.settle()
    assert driver.everything_seen().count(url) == 1
