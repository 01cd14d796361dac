"""The database unreachable while a delivery is accepted: 503 and one line, nothing lost."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from bot.slack.store import SqlProcessedEvents
from infra.jobs.inbox import JobInbox
from infra.jobs.queue import SqlJobQueue
from infra.storage.faults import is_connection_error
from testing.fake_assistant import FakeAssistant
from testing.slack import mention
from tests.bot.conftest import ALICE, RunApp, SlackEnv


class Outage:
    """Makes the first database write of a delivery fail as a lost connection would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.down = False
        # The main loop's writes, and the ack front's (its inbox stores each delivery).
        writes = ((SqlProcessedEvents, "claim"), (SqlJobQueue, "enqueue"), (JobInbox, "_attempt"))
        for cls, name in writes:
            self._wrap(monkeypatch, cls, name)

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> None:
        real = getattr(cls, name)

        async def maybe_down(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise psycopg.OperationalError("connection to server lost")
            return await real(*args, **kwargs)

        monkeypatch.setattr(cls, name, maybe_down)


async def the_retry_is_answered(env: SlackEnv, event_id: str) -> None:
    """Slack's retry of ``event_id`` is acked and answered (the caller counts the answers)."""
    status, _ = await env.sender.post_event(
        mention(ALICE.user_id, "hi"), event_id=event_id, retry_num=1
    )
    assert status == 200
    await env.fake.wait_for("chat.update")
    await env.fake.settle()


async def test_an_unreachable_database_answers_503_with_one_line_and_the_retry_once(
    run_app: RunApp,
    fake_assistant: FakeAssistant,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage(monkeypatch)
    async with run_app(fake_assistant) as env:
        outage.down = True
        caplog.clear()
        with caplog.at_level(logging.INFO):
            status, _ = await env.sender.post_event(mention(ALICE.user_id, "hi"), event_id="EvGONE")
        assert status == 503
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "EvGONE" in warnings[0].getMessage()
        assert warnings[0].exc_info is None
        assert not any(r.exc_info for r in caplog.records)

        outage.down = False
        await the_retry_is_answered(env, "EvGONE")
    assert len(fake_assistant.messages) == 1
    assert len(env.fake.calls_to("chat.update")) == 1


async def test_an_in_process_run_losing_the_database_asks_the_person_to_send_it_again(
    run_app: RunApp,
    fake_assistant: FakeAssistant,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def connection_lost(*_args: object, **_kwargs: object) -> None:
        raise psycopg.OperationalError("terminating connection due to administrator command")

    fake_assistant.handle_message = connection_lost  # type: ignore[method-assign,assignment]
    async with run_app(fake_assistant) as env:
        if env.durable:
            pytest.skip("a durable run goes back in the queue (tests/reliability)")
        caplog.clear()
        with caplog.at_level(logging.INFO):
            status, _ = await env.sender.post_event(mention(ALICE.user_id, "hi"))
            assert status == 200
            update = (await env.fake.wait_for("chat.update"))[0]
            await env.fake.settle()
    text = str(update["blocks"])
    assert "could not reach its database" in text
    assert "send it again" in text
    assert "Something went wrong" not in text
    assert "administrator command" not in text
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert not any(r.exc_info for r in caplog.records)


async def test_a_storage_error_that_is_not_a_lost_connection_answers_503_with_retry_after(
    run_app: RunApp,
    fake_assistant: FakeAssistant,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A disk error (not a lost connection) used to be a 500 with a traceback: it is a 503
    with Retry-After and one line, and Slack's retry is answered once."""
    broken = [True]
    error = OperationalError("INSERT", {}, sqlite3.OperationalError("disk I/O error"))
    assert not is_connection_error(error)
    real = JobInbox._attempt

    async def failing(*args: Any, **kwargs: Any) -> Any:
        if broken[0]:
            raise error
        return await real(*args, **kwargs)

    monkeypatch.setattr(JobInbox, "_attempt", failing)
    async with run_app(fake_assistant) as env:
        if not env.durable:
            pytest.skip("the ack front (and its inbox) serves durable runs only")
        caplog.clear()
        with caplog.at_level(logging.INFO):
            status, _ = await env.sender.post_event(mention(ALICE.user_id, "hi"), event_id="EvDISK")
        assert status == 503
        assert env.sender.last_headers.get("Retry-After") == "5"
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        assert "EvDISK" in lines[0].getMessage()
        assert "disk I/O error" in lines[0].getMessage()
        assert not any(r.exc_info for r in caplog.records)

        broken[0] = False
        await the_retry_is_answered(env, "EvDISK")
    assert len(fake_assistant.messages) == 1
