"""``opsbot prune``: retention — delete old threads (checkpoints and rows); with ``--audit``,
old audit events through the privileged path (see ``opsbot.retention``).

    opsbot prune                              # threads idle > OPSBOT_RETENTION__THREAD_DAYS
    opsbot prune --older-than 30d --dry-run   # what would go
    opsbot prune --audit --admin-database-url postgresql://postgres@db/opsbot
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings

_AGE = re.compile(r"^(\d+)([dhm]?)$")


def parse_age(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m`` or a number of days."""
    match = _AGE.match(text.strip())
    if match is None or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 90d, 12h or 30m")
    amount, unit = int(match.group(1)), match.group(2) or "d"
    try:
        return {"d": timedelta(days=amount), "h": timedelta(hours=amount)}.get(
            unit, timedelta(minutes=amount)
        )
    except OverflowError:  # past timedelta's 999,999,999 days
        raise argparse.ArgumentTypeError(f"{text!r} is longer than any age") from None


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "prune", help="delete old threads (checkpoints and rows); --audit: old audit events"
    )
    parser.add_argument(
        "--older-than",
        type=parse_age,
        default=None,
        help="threads idle longer than this (90d, 12h, 30m); default OPSBOT_RETENTION__THREAD_DAYS",
    )
    parser.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    parser.add_argument(
        "--audit",
        action="store_true",
        help="instead: delete audit events older than OPSBOT_RETENTION__AUDIT_DAYS (privileged)",
    )
    parser.add_argument(
        "--admin-database-url",
        default=None,
        help="--audit on PostgreSQL: a superuser URL (the app's own user cannot delete)",
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from agent_core.checkpointer import open_checkpointer
    from infra.clock import utc_now
    from infra.storage import create_engine
    from opsbot.retention import prune_audit, prune_threads

    url = settings.resolved_database_url
    if args.audit:
        days = settings.retention.audit_days
        if days is None:
            print("audit retention is off (OPSBOT_RETENTION__AUDIT_DAYS unset): nothing deleted")
            return 2
        admin = args.admin_database_url
        if admin is None and url.startswith("postgresql"):
            print("--audit on PostgreSQL needs --admin-database-url (a superuser)")
            return 2
        removed = await prune_audit(admin or url, older_than=timedelta(days=days), now=utc_now())
        print(json.dumps({"audit_events_deleted": removed, "older_than_days": days}))
        return 0
    older_than = args.older_than or timedelta(days=settings.retention.thread_days)
    engine = create_engine(url)
    try:
        async with open_checkpointer(url) as saver:
            report = await prune_threads(
                engine, saver, older_than=older_than, now=utc_now(), dry_run=args.dry_run
            )
    finally:
        await engine.dispose()
    print(json.dumps({**report.as_json(), "dry_run": args.dry_run}))
    return 0
