"""``opsbot serve``: Slack and Teams in one aiohttp process on ``$PORT``
(``POST /slack/events`` and ``POST /api/messages``), sharing the core, the sweeper and the
account-link callback. ``opsbot slack`` and ``opsbot teams`` serve one platform each."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "serve", help="run Slack and Teams in one process (/slack/events and /api/messages)"
    )
    parser.add_argument("--host", default="0.0.0.0", help="interface to bind")  # noqa: S104
    parser.add_argument("--port", type=int, default=None, help="port (default $PORT)")
    parser.set_defaults(handler=handle, check=check)


def check(args: argparse.Namespace, settings: Settings) -> None:
    from opsbot.commands.teams import require_teams
    from opsbot.config_check import require_link_key, require_slack

    require_slack(settings, socket_mode=False)
    require_teams(settings)
    if settings.broker.mode == "inprocess":
        require_link_key(settings)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from infra.serving import shutdown_event
    from opsbot.commands.slack import serve_slack

    port = settings.port if args.port is None else args.port
    await serve_slack(
        settings,
        socket_mode=False,
        host=args.host,
        port=port,
        stop=shutdown_event(),
        with_teams=True,
    )
    return 0
