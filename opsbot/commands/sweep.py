"""``opsbot sweep``: reject approvals past their maximum age and answer their requesters;
finish approvals a crash interrupted (as ``opsbot reconcile`` does) and tell theirs too.

Each expired approval's thread is resumed with the rejection, so the requester's conversation
gets an answer; when Slack is configured (``SLACK_BOT_TOKEN``, ``SLACK_SIGNING_SECRET``) the
card is updated and the requester's Slack thread is told, as the app's in-process sweeper does.
One pass by default (for cron); ``--every SECONDS`` keeps sweeping (the Procfile's
``sweeper`` process).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "sweep", help="auto-reject approvals past their maximum age (one pass, or --every N)"
    )
    parser.add_argument(
        "--every",
        type=float,
        metavar="SECONDS",
        help="sweep again every SECONDS until stopped, instead of one pass",
    )
    parser.set_defaults(handler=handle, check=check_link_key)


def check_link_key(args: argparse.Namespace, settings: Settings) -> None:
    """The in-process broker decrypts refresh tokens: its key must be configured."""
    from opsbot.config_check import require_link_key

    if settings.broker.mode == "inprocess":
        require_link_key(settings)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from opsbot.wiring import open_assistant

    # nan passed "<= 0" and then slept for ever: the sweeper stopped without a word
    if args.every is not None and not (math.isfinite(args.every) and args.every > 0):
        print("--every must be a positive number of seconds")
        return 2
    async with open_assistant(settings) as assistant, slack_notices(settings, assistant) as tell:
        while True:
            decided = await assistant.sweep_and_notify(
                tell, platform="slack" if tell is not None else None
            )
            for one in decided:
                print(
                    json.dumps(
                        {
                            "approval_id": one.approval_id,
                            "decision": one.decision,
                            "outcome": one.outcome,
                            "requester_thread": None
                            if one.requester_ref is None
                            else one.requester_ref.thread_ts,
                        }
                    ),
                    flush=True,
                )
            expired = sum(one.decision == "expired" for one in decided)
            print(
                f"{expired} approval(s) expired, {len(decided) - expired} interrupted one(s) "
                "finished",
                flush=True,
            )
            if args.every is None:
                return 0
            await asyncio.sleep(args.every)


@contextlib.asynccontextmanager
async def slack_notices(
    settings: Settings, assistant: Any
) -> AsyncIterator[Callable[[Any], Awaitable[None]] | None]:
    """The Slack adapter's ``announce`` when Slack is configured, else ``None``."""
    if settings.slack_bot_token is None or settings.slack_signing_secret is None:
        yield None
        return
    from bot.slack import open_bot
    from infra.storage import create_engine
    from opsbot.commands.slack import slack_config

    engine = create_engine(settings.resolved_database_url)
    try:
        async with open_bot(slack_config(settings), assistant, engine) as bot:
            yield bot.adapter.announce
    finally:
        await engine.dispose()
