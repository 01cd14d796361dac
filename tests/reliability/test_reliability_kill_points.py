"""Kill at each point of a turn: the real ``opsbot slack`` process (durable runs, the offline
demo model, the in-process broker, SQLite), with the dev IdP, the reference MCP servers and
the fake Slack, SIGKILLs itself at one point of a turn (``OPSBOT_TEST_CRASH_AT``,
``infra/faults.py``) and is started again, unarmed, on the same database. Each time the
question is answered once, its approval card is posted once, and the approved write happens
exactly once on the ticketing server (its change log).

The process is forked from the fork server (tests/forkserver.py), not started from scratch:
it kills itself, and the server reports that only once it is dead, as a real exit would be.

One process start per point: the process started after a kill is armed for the next point,
so a turn is cut at every point in turn and still ends answered once. The points:
(a) ``job_start``: the message was acknowledged and stored, its job starts;
(b) ``tool_call``: the first run's read is answered by its server, the run never sees it;
(c) ``before_card``: the run's interrupt is saved, the card is not posted; (d) ``after_write``:
the approved write ran at its server, its outcome is not saved and the run not resumed.
docs/architecture.md (the agent graph and its checkpoints) says why each survives."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mcp_servers import ReferenceServers
from testing.identity import RunningIdp
from testing.opsbot_process import AppProcess
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    FakeSlack,
    SlackSender,
    block_action,
    card_decided,
    mention,
)
from tests.bot.test_slack_events import _texts
from tests.reliability.opsbot_process import app_env, opsbot_slack

BOUND = 120.0  # a loaded machine imports the app slowly (each point restarts it)
CHANNEL, TS, READ_TS = "C0PAY", "1700003000.000100", "1700003000.000200"
READ, WRITE = "show ticket PAY-101", "close ticket PAY-102 because merchants re-exported"
# Recovery in the restarted process within a second, not the production 20 s + 5 s.
FAST_RECOVERY = {
    "OPSBOT_APPROVALS__SWEEP_INTERVAL_SECONDS": "0.2",
    "OPSBOT_APPROVALS__RECONCILE_GRACE_SECONDS": "0.5",
}


async def _died(app: AppProcess) -> None:
    await asyncio.wait_for(app.proc.wait(), BOUND)
    assert app.proc.returncode == -signal.SIGKILL, "\n".join(app.lines[-30:])
    assert app.count("test crash point") == 1


async def _ask(sender: SlackSender, text: str, ts: str, *, retry: int | None = None) -> int:
    """Post the mention; 0 when the process died before Slack's ack could be read."""
    try:
        status, _ = await sender.post_event(
            mention("U0ALICE", text, channel=CHANNEL, ts=ts), event_id=f"Ev{ts}", retry_num=retry
        )
    except aiohttp.ClientError:
        return 0
    return status


def _cards(fake: FakeSlack) -> list[dict[str, Any]]:
    return [m for (ch, _ts), m in fake.messages.items() if ch == APPROVALS_CHANNEL_ID]


async def _approve(sender: SlackSender, fake: FakeSlack) -> None:
    (card,) = _cards(fake)
    approval_id = card["blocks"][-1]["elements"][0]["value"]
    status, _ = await sender.post_interaction(
        block_action("U0BOB", "approval_approve", approval_id, message_ts=card["ts"])
    )
    assert status == 200


def _told_approved(fake: FakeSlack) -> list[dict[str, Any]]:
    return [
        p
        for p in fake.calls_to("chat.postMessage")
        if p["channel"] == CHANNEL and "approved" in str(p.get("text"))
    ]


async def _until(what: str, condition: Any) -> None:
    async def poll() -> None:
        # Another process's effects on the fake Slack: polled, nothing to await on.
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), BOUND)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
def env(
    sqlite_url: str,
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    tmp_path: Path,
) -> dict[str, str]:
    return app_env(sqlite_url, tmp_path, fake_slack, dev_idp, reference_servers, **FAST_RECOVERY)


def _read_answers(fake: FakeSlack) -> list[dict[str, Any]]:
    return [m for m in fake.thread(CHANNEL, READ_TS) if "PAY-101" in _texts(m.get("blocks") or [])]


async def _closes(servers: ReferenceServers) -> list[tuple[str, str]]:
    changes = await servers.tickets.all_changes()
    return [(c.tool, c.subject) for c in changes if c.ticket_key == "PAY-102"]


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_killed_at_each_point_of_a_turn_answers_cards_and_writes_once(
    env: dict[str, str], fake_slack: FakeSlack, reference_servers: ReferenceServers
) -> None:
    def armed(point: str) -> Any:
        return opsbot_slack({**env, "OPSBOT_TEST_CRASH_AT": point}, bound=BOUND, forked=True)

    def thread_texts() -> list[str]:
        return [
            _texts(m.get("blocks") or []) + str(m.get("text"))
            for m in fake_slack.thread(CHANNEL, TS)
        ]

    async with aiohttp.ClientSession() as session:
        # (a) The write request is acknowledged (stored first), then its job is killed.
        async with armed("job_start") as app:
            sender = SlackSender(app.url, session=session)
            await app.link(sender, "U0ALICE", "alice")
            await app.link(sender, "U0BOB", "bob")
            acked = await _ask(sender, WRITE, TS)
            await _died(app)
        assert _cards(fake_slack) == []

        # (c) Restarted: the stored message is run, the interrupt saved, killed before the card.
        async with armed("before_card") as app:
            if not acked:  # the kill beat the ack: Slack delivers the event again
                assert await _ask(SlackSender(app.url, session=session), WRITE, TS, retry=1) == 200
            await _died(app)
        assert _cards(fake_slack) == []

        # (d) Restarted: the same pending proposal gets its one card; bob approves; the
        # write runs at the server, killed before its outcome is saved and the run resumed.
        async with armed("after_write") as app:
            sender = SlackSender(app.url, session=session)
            await _until("the card", lambda: len(_cards(fake_slack)) == 1)
            await _approve(sender, fake_slack)
            await _died(app)
        assert await _closes(reference_servers) == [("close_ticket", "alice")]
        assert _told_approved(fake_slack) == []

        # (b) Restarted: the sweep finishes the approval from the audit log (the write is not
        # sent again: a second call would also hit this crash point) and resumes the run.
        # Then a read question is killed during its tool call.
        async with armed("tool_call") as app:
            sender = SlackSender(app.url, session=session)
            await _until("the requester to be told", lambda: _told_approved(fake_slack) != [])
            await fake_slack.wait_for("chat.update", where=card_decided, wait=BOUND)
            assert await _ask(sender, READ, READ_TS) == 200
            await _died(app)

        async with opsbot_slack(env, bound=BOUND, forked=True) as app:
            await _until("the read's answer", lambda: _read_answers(fake_slack) != [])
            await fake_slack.settle(quiet=0.5, limit=BOUND)
            assert app.count("test crash point") == 0

    assert len(_cards(fake_slack)) == 1
    assert len(_told_approved(fake_slack)) == 1
    assert await _closes(reference_servers) == [("close_ticket", "alice")]
    # One answer in the question's thread: the note (its placeholder, decided in place) and
    # the requester's result, nothing posted twice by the runs the kills cut short.
    [note, result] = thread_texts()
    assert "approved* by bob" in note
    assert "approved* by bob" in result
    [answer] = fake_slack.thread(CHANNEL, READ_TS)
    assert "PAY-101" in _texts(answer.get("blocks") or [])
