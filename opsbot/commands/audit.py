"""``opsbot audit``: read the audit log by user, thread and time (read-only)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from opsbot.commands.args import count_up_to

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("audit", help="query the audit log (by user, thread, time)")
    parser.add_argument("--user", help="requester subject")
    parser.add_argument("--thread", help="thread id")
    parser.add_argument("--since", type=datetime.fromisoformat, help="ISO time, inclusive")
    parser.add_argument("--until", type=datetime.fromisoformat, help="ISO time, inclusive")
    parser.add_argument("--limit", type=count_up_to(100_000), default=200)
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from audit import AuditQuery, AuditQueryError, SqlAuditSink
    from infra.storage import create_engine

    for name in ("since", "until"):
        value = getattr(args, name)
        if value is not None and value.tzinfo is None:
            print(f"--{name} needs a time zone, e.g. 2026-12-02T12:00:00+00:00")
            return 2
    try:
        query = AuditQuery(
            requester=args.user,
            thread_id=args.thread,
            since=args.since,
            until=args.until,
            limit=args.limit,
        )
    except AuditQueryError as exc:
        print(f"invalid query: {exc}")
        return 2
    engine = create_engine(settings.resolved_database_url)
    try:
        events = await SqlAuditSink(engine).query(query)
    finally:
        await engine.dispose()
    for e in events:
        row = {
            "at": e.at.isoformat(),
            "kind": e.kind.value,
            "requester": e.requester,
            "thread_id": e.thread_id,
            "tool": e.tool,
            "args": e.args_summary,
            "outcome": e.outcome,
            "latency_ms": e.latency_ms,
            "approval_id": e.approval_id,
            "approver": e.approver,
            "decision": e.decision,
            "edited_args": e.edited_args_summary,
            "idempotency_key": e.idempotency_key,
        }
        print(json.dumps({k: v for k, v in row.items() if v is not None}, default=str))
    return 0
