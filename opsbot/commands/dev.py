"""``opsbot dev``: the whole system on one machine with embedded defaults, and a Slack-like
web UI (the sandbox). Prints the URL to open; Ctrl-C stops everything."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "dev",
        help="run the sandbox: dev IdP, MCP servers, the bot and a Slack-like web UI (local only)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="web UI port (default OPSBOT_SANDBOX__PORT, 8000)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep links, approvals and conversations across restarts (default: start from "
        "the seed data every time)",
    )
    parser.set_defaults(handler=handle)


class _DropClosedSessionNoise(logging.Filter):
    """The MCP SDK logs a traceback each time a client closes a session it had streaming
    (``anyio.ClosedResourceError`` in the standalone SSE writer): harmless, and alarming in
    a newcomer's terminal after every question."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage().startswith("Error in standalone SSE writer")
            and type(exc).__name__ == "ClosedResourceError"
        )


def _quiet_logs() -> None:
    # One line per HTTP request between the sandbox's own components drowns everything else.
    # The Agents SDK (the Teams app) logs every Connector call at INFO.
    for name in (
        "httpx",
        "mcp.server.streamable_http_manager",
        "mcp.client.streamable_http",
        "microsoft_agents",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("mcp.server.streamable_http").addFilter(_DropClosedSessionNoise())


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from infra.serving import PortInUseError, shutdown_event
    from sandbox import open_sandbox

    if args.port is not None:
        sandbox = settings.sandbox.model_copy(update={"port": args.port})
        settings = settings.model_copy(update={"sandbox": sandbox})
    _quiet_logs()
    stop = shutdown_event()
    try:
        async with open_sandbox(settings, background=True, keep=args.keep) as running:
            model = settings.model if settings.model != "demo" else "demo (offline)"
            kept = "kept across restarts" if args.keep else "reset on every start"
            teams_view = f" (Teams: {running.urls.ui}/teams)" if running.teams else ""
            print(
                f"opsbot dev: the sandbox is running (model {model}; data in "
                f"{running.data_dir}, {kept}).\n"
                f"  Open {running.urls.ui} in your browser{teams_view}.\n"
                f"  Slack app {running.urls.app}/slack/events · dev IdP {running.urls.idp} · "
                + " · ".join(f"{name} {url}" for name, url in running.urls.mcp.items())
                + "\nPress Ctrl-C to stop.",
                flush=True,
            )
            # The bot, IdP and MCP servers finish loading while the page is open; what the
            # user sends meanwhile waits for them. A failure there ends the sandbox.
            stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
            waiting: set[asyncio.Future[Any]] = {stopping, running.ready}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if running.ready.done() and not stopping.done():
                running.ready.result()
                print("opsbot dev: the bot is ready.", flush=True)
                await stopping
            stopping.cancel()
            print("opsbot dev: stopping…", flush=True)
    except PortInUseError as exc:
        print(f"opsbot dev: {exc.strerror}", file=sys.stderr)
        return 2
    print("opsbot dev: stopped.", flush=True)
    return 0
