"""``opsbot sweep``: reject approvals past their maximum age and answer their requesters.

One pass, then exit (for cron); the app runs the same sweep in-process every
``OPSBOT_APPROVALS__SWEEP_INTERVAL_SECONDS``. Each expired approval's thread is resumed with
the rejection, so the requester's conversation gets an answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from opsbot.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "sweep", help="auto-reject approvals past their maximum age (one pass)"
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from opsbot.assistant import open_assistant

    async with open_assistant(settings) as assistant:
        expired = await assistant.sweep()
    for decided in expired:
        print(
            json.dumps(
                {
                    "approval_id": decided.approval_id,
                    "outcome": decided.outcome,
                    "requester_thread": None
                    if decided.requester_ref is None
                    else decided.requester_ref.thread_ts,
                }
            )
        )
    print(f"{len(expired)} approval(s) expired")
    return 0
