"""``opsbot reconcile``: settle writes whose outcome was never recorded.

Finds ``write_pending`` audit records with no outcome (a crash between the call and the
record), looks each up in its server's change log by idempotency key (as the requester),
appends the outcome found, then finishes approvals left in ``deciding`` by a crash (the
idempotency key stops a second write). Prints what is still ambiguous; exit code 3 if any.
The sweeper (``opsbot sweep``, and the app's in-process one) does the same on every pass and
tells the requesters; this command is for running it by hand (and tells them too when Slack
is configured).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from opsbot.commands.sweep import check_link_key

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "reconcile", help="resolve ambiguous writes from the servers' change logs"
    )
    parser.set_defaults(handler=handle, check=check_link_key)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from assistant.service import notify_each
    from opsbot.commands.sweep import slack_notices
    from opsbot.wiring import open_assistant

    async with open_assistant(settings) as assistant, slack_notices(settings, assistant) as tell:
        recovered = await assistant.recover()
        await notify_each(recovered.finished, tell)
    report = recovered.reconciled
    for event, outcome in report.resolved:
        print(
            json.dumps({"resolved": event.idempotency_key, "tool": event.tool, "outcome": outcome})
        )
    for decided in recovered.finished:
        print(json.dumps({"approval_finished": decided.approval_id, "status": decided.outcome}))
    for event, reason in report.ambiguous:
        print(json.dumps({"ambiguous": event.idempotency_key, "tool": event.tool, "why": reason}))
    print(
        f"{len(report.resolved)} resolved, {len(recovered.finished)} approval(s) finished, "
        f"{len(report.ambiguous)} still ambiguous, {len(report.too_recent)} too recent to judge"
    )
    return 3 if report.ambiguous else 0
