"""``opsbot audit``, ``opsbot sweep`` and ``opsbot reconcile`` on a real (SQLite) database."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path

import pytest
from approval_fakes import make_interrupt
from pydantic import SecretStr

from agent_core.clock import utc_now
from approvals import ApprovalStatus, SqlApprovalStore
from approvals.records import ActionRequest, Approval
from audit import AuditLog, SqlAuditSink
from opsbot.cli import build_parser
from opsbot.settings import Settings
from opsbot.storage import create_engine
from tests.fixtures.slack import BOT_TOKEN, FakeSlack


@pytest.fixture
def settings(sqlite_url: str, tmp_path: Path) -> Settings:
    return Settings(_env_file=None, database_url=sqlite_url, data_dir=tmp_path)  # type: ignore[call-arg]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


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
    now = utc_now()
    request = make_interrupt().action_requests[0]
    await store.create(
        Approval(
            approval_id="apr-old",
            thread_id="thr-gone",
            requester_subject="alice",
            actions=(
                ActionRequest(
                    request.name, "ticketing", dict(request.args), approver_group="ticket-leads"
                ),
            ),
            created_at=now - timedelta(hours=2),
            expires_at=now - timedelta(hours=1),
        )
    )
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
    now = utc_now()
    request = make_interrupt().action_requests[0]
    await SqlApprovalStore(engine).create(
        Approval(
            approval_id="apr-slack",
            thread_id="thr-gone",
            requester_subject="alice",
            actions=(
                ActionRequest(
                    request.name, "ticketing", dict(request.args), approver_group="ticket-leads"
                ),
            ),
            created_at=now - timedelta(hours=2),
            expires_at=now - timedelta(hours=1),
        )
    )
    card_ts = fake_slack._api_chat_postMessage({"channel": "C0APPROVALS", "text": "card"})["ts"]
    await SqlApprovalMessages(engine).save(
        "apr-slack", "T1", ("C0APPROVALS", card_ts), ("C0OPS", "200.1")
    )
    await engine.dispose()
    slack = settings.model_copy(
        update={
            "slack_bot_token": SecretStr(BOT_TOKEN),
            "slack_signing_secret": SecretStr("signing"),
            "slack_api_url": fake_slack.url,
        }
    )
    args = parse("sweep")
    assert await args.handler(args, slack) == 0
    assert "1 approval(s) expired" in capsys.readouterr().out
    [update] = fake_slack.calls_to("chat.update")
    assert (update["channel"], update["ts"]) == ("C0APPROVALS", card_ts)
    told = [c for c in fake_slack.calls_to("chat.postMessage") if c.get("thread_ts") == "200.1"]
    assert told
    assert "expired" in json.dumps(told[0])


async def test_sweep_every_must_be_positive(settings: Settings) -> None:
    args = parse("sweep", "--every", "0")
    assert await args.handler(args, settings) == 2


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
