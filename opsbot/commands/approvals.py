"""``opsbot approvals``: list approvals and their state, worded as the card, the requester's
thread and App Home word it (``assistant.outcomes``). Read-only; one JSON object a line.

    opsbot approvals                       # the most recent 50
    opsbot approvals --state failed --user alice
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from opsbot.commands.args import count_up_to

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("approvals", help="list approvals with their state and reason")
    parser.add_argument("--state", action="append", help="only these states (repeatable)")
    parser.add_argument("--user", help="requester subject")
    parser.add_argument("--limit", type=count_up_to(100_000), default=50)
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from approvals import ApprovalStatus, SqlApprovalStore
    from assistant.outcomes import args_summary, describe_state, reason_of, state_of
    from infra.storage import create_engine

    wanted = {s.strip().lower() for s in args.state or ()}
    engine = create_engine(settings.resolved_database_url)
    try:
        found = await SqlApprovalStore(engine).find(
            statuses=list(ApprovalStatus), requester_subject=args.user, limit=100_000
        )
    finally:
        await engine.dispose()
    rows = []
    for approval in sorted(found, key=lambda a: a.created_at):
        state = state_of(approval)
        if wanted and state not in wanted:
            continue
        action = approval.actions[0]
        rows.append(
            {
                "approval_id": approval.approval_id,
                "created_at": approval.created_at.isoformat(),
                "requester": approval.requester_subject,
                "tool": action.tool,
                "server": action.server,
                "args": args_summary(dict(action.args)),
                "state": state,
                "reason": reason_of(approval),
                "shown_as": describe_state(state, reason_of(approval)),
                "decided_by": approval.decided_by,
            }
        )
    for row in rows[-args.limit :] if args.limit > 0 else rows:
        print(json.dumps({k: v for k, v in row.items() if v is not None}))
    return 0
