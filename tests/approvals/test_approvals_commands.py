"""``opsbot audit``, ``opsbot sweep`` and ``opsbot reconcile`` on a real (SQLite) database."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path

import pytest
from approval_fakes import make_interrupt
from pydantic import SecretStr

from approvals import ActionDecision, ApprovalStatus, SqlApprovalStore
from approvals.records import ActionRequest, Approval
from audit import AuditLog, SqlAuditSink
from infra.clock import utc_now
from infra.settings import Settings
from infra.storage import create_engine
from opsbot.cli import build_parser
from testing.slack import BOT_TOKEN, BOT_USER_ID, FakeSlack


@pytest.fixture
def settings(sqlite_url: str, tmp_path: Path) -> Settings:
    return Settings(_env_file=None, database_url=sqlite_url, data_dir=tmp_path)  # type: ignore[call-arg]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def close_request(approval_id: str, created: timedelta, expires: timedelta) -> Approval:
    """alice's request to close a ticket, created and expiring at these offsets from now."""
    now = utc_now()
    request = make_interrupt().action_requests[0]
    return Approval(
        approval_id=approval_id,
        thread_id="thr-gone",
        requester_subject="alice",
        actions=(
            ActionRequest(
                request.name, "ticketing", dict(request.args), approver_group="ticket-leads"
            ),
        ),
        created_at=now + created,
        expires_at=now + expires,
    )


def with_slack(settings: Settings, fake_slack: FakeSlack) -> Settings:
    return settings.model_copy(
        update={
            "slack_bot_token": SecretStr(BOT_TOKEN),
            "slack_signing_secret": SecretStr("signing"),
            "slack_api_url": fake_slack.url,
        }
    )


async def test_audit_queries_by_user_and_thread(
    settings: Settings, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = create_engine(sqlite_url)
    log = AuditLog(SqlAuditSink(engine))
    for user, thread in (("alice", "t1"), ("dave", "t2")):
        await log.tool_call(
            requester=user,
            thread_id=thread,
            tool="ticketing_get_ticket",
            args={"key": "PAY-1", "cc": f"{user}@example.com"},
            outcome="success",
            latency_ms=2.0,
        )
    await engine.dispose()
    args = parse("audit", "--user", "alice")
    assert await args.handler(args, settings) == 0
    [line] = capsys.readouterr().out.splitlines()
    row = json.loads(line)
    assert (row["requester"], row["thread_id"], row["outcome"]) == ("alice", "t1", "success")
    assert row["args"]["cc"] == "a***@example.com"
    args = parse("audit", "--thread", "t2", "--since", "2026-01-01T00:00:00+00:00")
    assert await args.handler(args, settings) == 0
    assert [json.loads(x)["requester"] for x in capsys.readouterr().out.splitlines()] == ["dave"]
    bad = parse(
        "audit", "--since", "2026-01-02T00:00:00+00:00", "--until", "2026-01-01T00:00:00+00:00"
    )
    assert await bad.handler(bad, settings) == 2


async def test_sweep_expires_overdue_approvals(
    settings: Settings, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = create_engine(sqlite_url)
    store = SqlApprovalStore(engine)
    await store.create(close_request("apr-old", -timedelta(hours=2), -timedelta(hours=1)))
    args = parse("sweep")
    assert await args.handler(args, settings) == 0
    out = capsys.readouterr().out
    assert "1 approval(s) expired" in out
    done = await store.get("apr-old")
    await engine.dispose()
    assert done is not None
    assert done.status is ApprovalStatus.EXPIRED
    assert done.decided_by == "system:expiry"


async def test_sweep_tells_slack_when_slack_is_configured(
    settings: Settings, sqlite_url: str, fake_slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.slack.store import SqlApprovalMessages

    engine = create_engine(sqlite_url)
    await SqlApprovalStore(engine).create(
        close_request("apr-slack", -timedelta(hours=2), -timedelta(hours=1))
    )
    card_ts = fake_slack.workspace.post("C0APPROVALS", BOT_USER_ID, "card").ts
    await SqlApprovalMessages(engine).save(
        "apr-slack", "T1", ("C0APPROVALS", card_ts), ("C0OPS", "200.1")
    )
    await engine.dispose()
    slack = with_slack(settings, fake_slack)
    args = parse("sweep")
    assert await args.handler(args, slack) == 0
    assert "1 approval(s) expired" in capsys.readouterr().out
    [update] = fake_slack.calls_to("chat.update")
    assert (update["channel"], update["ts"]) == ("C0APPROVALS", card_ts)
    told = [c for c in fake_slack.calls_to("chat.postMessage") if c.get("thread_ts") == "200.1"]
    assert told
    assert "expired" in json.dumps(told[0])


async def test_sweep_finishes_an_approval_a_crash_left_deciding_and_tells_slack(
    settings: Settings, sqlite_url: str, fake_slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    """bob's click was claimed, then the instance died before resuming: the next sweep (on
    any instance) finishes it and tells the card and the requester; later sweeps do not."""
    from bot.slack.store import SqlApprovalMessages

    engine = create_engine(sqlite_url)
    store = SqlApprovalStore(engine)
    now = utc_now()
    for approval_id, claimed_ago in (("apr-stuck", 10), ("apr-busy", 0)):
        await store.create(
            close_request(approval_id, -timedelta(minutes=20), timedelta(minutes=10))
        )
        await store.claim(
            approval_id, "bob", [ActionDecision("approve")], now - timedelta(minutes=claimed_ago)
        )
    card_ts = fake_slack.workspace.post("C0APPROVALS", BOT_USER_ID, "card").ts
    await SqlApprovalMessages(engine).save(
        "apr-stuck", "T1", ("C0APPROVALS", card_ts), ("C0OPS", "300.1")
    )
    slack = with_slack(settings, fake_slack)
    args = parse("sweep")
    assert await args.handler(args, slack) == 0
    assert "0 approval(s) expired, 1 interrupted one(s) finished" in capsys.readouterr().out
    stuck, busy = await store.get("apr-stuck"), await store.get("apr-busy")
    assert stuck is not None
    assert busy is not None
    # Its thread is gone, so it cannot be resumed: it ends failed, never half-done.
    assert stuck.status is ApprovalStatus.FAILED
    assert busy.status is ApprovalStatus.DECIDING  # within the grace: maybe still running
    [update] = fake_slack.calls_to("chat.update")
    assert (update["channel"], update["ts"]) == ("C0APPROVALS", card_ts)
    told = [c for c in fake_slack.calls_to("chat.postMessage") if c.get("thread_ts") == "300.1"]
    assert len(told) == 1
    assert "approved" in json.dumps(told[0])

    assert await args.handler(args, slack) == 0
    assert "1 interrupted one(s) finished" not in capsys.readouterr().out
    await engine.dispose()
    assert len(fake_slack.calls_to("chat.update")) == 1


async def test_sweep_every_must_be_positive(settings: Settings) -> None:
    for every in ("0", "-1", "nan", "inf"):  # nan slept for ever: the sweeping stopped
        args = parse("sweep", "--every", every)
        assert await args.handler(args, settings) == 2, every


async def test_reconcile_reports_what_stays_ambiguous(
    settings: Settings, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = create_engine(sqlite_url)
    log = AuditLog(SqlAuditSink(engine), clock=lambda: utc_now() - timedelta(hours=1))
    await log.write_pending(
        requester="alice",
        thread_id="t1",
        tool="billing_refund",  # no change log is known for this server
        args={"order": "O-1"},
        idempotency_key="opsbot-k1",
    )
    await engine.dispose()
    args = parse("reconcile")
    assert await args.handler(args, settings) == 3
    out = capsys.readouterr().out
    assert '"ambiguous": "opsbot-k1"' in out
    assert "1 still ambiguous" in out


async def test_reconcile_finishes_an_interrupted_approval_and_tells_slack(
    settings: Settings, sqlite_url: str, fake_slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.slack.store import SqlApprovalMessages

    engine = create_engine(sqlite_url)
    store = SqlApprovalStore(engine)
    await store.create(close_request("apr-hand", -timedelta(minutes=20), timedelta(minutes=10)))
    await store.claim(
        "apr-hand", "bob", [ActionDecision("approve")], utc_now() - timedelta(minutes=10)
    )
    card_ts = fake_slack.workspace.post("C0APPROVALS", BOT_USER_ID, "card").ts
    await SqlApprovalMessages(engine).save(
        "apr-hand", "T1", ("C0APPROVALS", card_ts), ("C0OPS", "400.1")
    )
    args = parse("reconcile")
    assert await args.handler(args, with_slack(settings, fake_slack)) == 0
    assert '"approval_finished": "apr-hand"' in capsys.readouterr().out
    done = await store.get("apr-hand")
    await engine.dispose()
    assert done is not None
    assert done.status.is_final
    [update] = fake_slack.calls_to("chat.update")
    assert update["ts"] == card_ts
    assert [c for c in fake_slack.calls_to("chat.postMessage") if c.get("thread_ts") == "400.1"]
