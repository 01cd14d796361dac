"""``opsbot approvals`` words each state as the card and the thread do (describe_state)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from test_approvals_commands import close_request, parse

from approvals import ActionDecision, ApprovalStatus, SqlApprovalStore
from assistant.outcomes import describe_state
from infra.clock import utc_now
from infra.settings import Settings
from infra.storage import create_engine


async def test_lists_each_approval_with_the_shared_state_wording(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(_env_file=None, database_url=sqlite_url, data_dir=tmp_path)  # type: ignore[call-arg]
    engine = create_engine(sqlite_url)
    store = SqlApprovalStore(engine)
    try:
        await store.create(close_request("ap-wait", timedelta(0), timedelta(hours=1)))
        await store.create(close_request("ap-fail", timedelta(seconds=1), timedelta(hours=1)))
        await store.claim("ap-fail", "bob", [ActionDecision("approve")], utc_now())
        reason = "the ticketing server refused ticketing_close_ticket: PAY-104 is already closed"
        await store.finish("ap-fail", ApprovalStatus.FAILED, {"reason": reason})
    finally:
        await engine.dispose()

    args = parse("approvals")
    assert await args.handler(args, settings) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["approval_id"], r["state"]) for r in rows] == [
        ("ap-wait", "pending"),
        ("ap-fail", "failed"),
    ]
    assert rows[1]["shown_as"] == describe_state("failed", reason) == f"failed: {reason}"
    assert rows[1]["decided_by"] == "bob"
    assert "key=" in rows[0]["args"]

    args = parse("approvals", "--state", "failed")
    assert await args.handler(args, settings) == 0
    only = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["approval_id"] for r in only] == ["ap-fail"]
