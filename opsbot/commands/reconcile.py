"""``opsbot reconcile``: settle writes whose outcome was never recorded.

Finds ``write_pending`` audit records with no outcome (a crash between the call and the
record), looks each up in its server's change log by idempotency key (as the requester),
appends the outcome found, then finishes approvals left in ``deciding`` by a crash (the
idempotency key stops a second write). Prints what is still ambiguous; exit code 3 if any.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

from opsbot.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "reconcile", help="resolve ambiguous writes from the servers' change logs"
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from agent_core.clock import utc_now
    from approvals import ApprovalError, ApprovalStatus
    from audit.reconcile import McpChangeLog, Reconciler
    from opsbot.assistant import open_assistant

    grace = timedelta(seconds=settings.approvals.reconcile_grace_seconds)
    async with open_assistant(settings) as assistant:
        identities = assistant.identities

        async def token_for(subject: str, server: str) -> str:
            identity = await identities.resolve_subject(subject)
            return (await identities.get_token(identity, server)).value

        urls = {s.name: s.url for s in settings.mcp_servers}
        service = assistant.approvals
        report = await Reconciler(service.audit, McpChangeLog(urls, token_for), grace=grace).run()
        finished = []
        cutoff = utc_now() - grace
        for stuck in await service.store.find(statuses=[ApprovalStatus.DECIDING], limit=500):
            if stuck.decided_at is not None and stuck.decided_at > cutoff:
                continue  # may still be running on another instance
            try:
                done = await service.retry(stuck.approval_id)
            except ApprovalError:
                continue
            finished.append((stuck.approval_id, done.approval.status.value))
    for event, outcome in report.resolved:
        print(
            json.dumps({"resolved": event.idempotency_key, "tool": event.tool, "outcome": outcome})
        )
    for approval_id, status in finished:
        print(json.dumps({"approval_finished": approval_id, "status": status}))
    for event, reason in report.ambiguous:
        print(json.dumps({"ambiguous": event.idempotency_key, "tool": event.tool, "why": reason}))
    print(
        f"{len(report.resolved)} resolved, {len(finished)} approval(s) finished, "
        f"{len(report.ambiguous)} still ambiguous, {len(report.too_recent)} too recent to judge"
    )
    return 3 if report.ambiguous else 0
